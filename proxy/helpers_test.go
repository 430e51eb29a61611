package proxy_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// image is a small RAFS image whose one blob is in a test registry.
type image struct {
	blob   rafs.Digest
	data   []byte       // the blob
	chunks []rafs.Chunk // its chunks in offset order
}

// buildImage builds a one-layer RAFS image with compressible and
// incompressible files and pushes its blob to reg as repo.
func buildImage(t *testing.T, reg *registrytest.Registry, repo string) image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := map[string][]byte{
		"random.bin": randBytes(7, 300<<10),
		"text.txt":   bytes.Repeat([]byte("damselfly chunks, lazily loaded. "), 8000),
		"small.txt":  []byte("hello\n"),
	}
	names := []string{"random.bin", "small.txt", "text.txt"}
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)})
		tw.Write(files[n])
	}
	tw.Close()
	dir := t.TempDir()
	layer := buf.Bytes()
	res, err := rafs.Build(t.Context(), []rafs.LayerSource{{Name: "l0", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer)), nil
	}}}, rafs.BuildOptions{ChunkSize: rafs.MinChunkSize, BlobDir: dir, Workers: 2})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	b, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Blobs) != 1 {
		t.Fatalf("got %d blobs, want 1", len(res.Blobs))
	}
	data, err := os.ReadFile(rafs.BlobPath(dir, res.Blobs[0].Digest))
	if err != nil {
		t.Fatal(err)
	}
	img := image{data: data}
	img.blob = reg.PushBlob(t, repo, data)
	if img.blob != res.Blobs[0].Digest {
		t.Fatalf("pushed blob %s, built %s", img.blob, res.Blobs[0].Digest)
	}
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		img.chunks = append(img.chunks, c)
	}
	sort.Slice(img.chunks, func(i, j int) bool { return img.chunks[i].CompressedOffset < img.chunks[j].CompressedOffset })
	var raw, compressed int
	for _, c := range img.chunks {
		if c.Compressed() {
			compressed++
		} else {
			raw++
		}
	}
	if len(img.chunks) < 6 || raw == 0 || compressed == 0 {
		t.Fatalf("image has %d chunks (%d raw, %d compressed): want several of each", len(img.chunks), raw, compressed)
	}
	return img
}

// registrySource is a real ChunkSource: it reads each chunk from the
// origin registry by range and verifies it before delivering. Verified
// chunks are kept by offset, as a node cache would keep them.
type registrySource struct {
	up *registry.Client

	mu    sync.Mutex
	cache map[string][]byte
}

func (s *registrySource) cached(key string, c rafs.Chunk) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.cache[key]; len(b) == int(c.CompressedSize) {
		return b
	}
	return nil
}

func (s *registrySource) keep(key string, stored []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil {
		s.cache = map[string][]byte{}
	}
	s.cache[key] = stored
}

func (s *registrySource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	var plain []byte
	for i, c := range chunks {
		// Keyed by credentials too: a client without them must not get
		// what another client's credentials fetched.
		key := fmt.Sprintf("%s|%s|%s|%d", up.Registry, up.Repo, up.Authorization, c.CompressedOffset)
		if stored := s.cached(key, c); stored != nil {
			if err := deliver(i, c, stored); err != nil {
				return err
			}
			continue
		}
		stored := make([]byte, c.CompressedSize)
		if err := s.up.ReadRange(ctx, up, blob, int64(c.CompressedOffset), stored); err != nil {
			return &chunkapi.ChunkError{Index: i, Transient: registry.IsTransient(err), Err: err}
		}
		plain = append(plain[:0], make([]byte, c.Size)...)
		if err := rafs.DecodeChunk(c, stored, plain); err != nil {
			return &chunkapi.ChunkError{Index: i, Err: err}
		}
		s.keep(key, stored)
		if err := deliver(i, c, stored); err != nil {
			return err
		}
	}
	return nil
}

// corruptingSource delivers chunk at with one byte flipped after the
// inner source verified it: bytes damaged between a peer and the client.
type corruptingSource struct {
	inner proxy.ChunkSource
	at    int
}

func (s *corruptingSource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return s.inner.ReadChunks(ctx, up, blob, chunks, func(i int, c rafs.Chunk, stored []byte) error {
		if i == s.at {
			stored = bytes.Clone(stored)
			stored[len(stored)/2] ^= 0x5a
		}
		return deliver(i, c, stored)
	})
}

// env is a registry, an upstream client and a running proxy.
type env struct {
	reg  *registrytest.Registry
	up   *registry.Client
	srv  *proxy.Server
	prom *prometheus.Registry
	url  string
}

type envOptions struct {
	auth   *registrytest.Auth
	upCfg  func(*registry.Config)
	cfg    func(*proxy.Config)
	source func(*registry.Client) proxy.ChunkSource
	opts   []proxy.Option
}

// newEnv starts a registry and a proxy in front of it (the registry is
// the proxy's default), stopped in t.Cleanup.
func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{reg: registrytest.New(t, o.auth), prom: prometheus.NewRegistry()}
	ucfg := registry.Default()
	ucfg.DefaultRegistry = e.reg.URL
	ucfg.Timeout = 10 * time.Second
	if o.upCfg != nil {
		o.upCfg(&ucfg)
	}
	up, err := registry.New(ucfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.up = up
	cfg := proxy.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	var src proxy.ChunkSource = &registrySource{up: up}
	if o.source != nil {
		src = o.source(up)
	}
	e.srv, err = proxy.New(cfg, src, up, e.prom, nil, o.opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	e.url = e.srv.URL()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		up.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return e
}

// get does a request to the proxy and returns status, headers and body.
func (e *env) do(t *testing.T, method, path string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, body
}

// post sends a raw batch request body.
func (e *env) post(t *testing.T, body []byte, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, e.url+chunkapi.BatchPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func chunkErr(t *testing.T, err error) *chunkapi.ChunkError {
	t.Helper()
	var ce *chunkapi.ChunkError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *chunkapi.ChunkError", err)
	}
	return ce
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func itoa(n int) string { return strconv.Itoa(n) }

// testMetric reads one unlabelled counter from the env's registry.
func testMetric(t *testing.T, e *env, name string) float64 {
	t.Helper()
	mfs, err := e.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// testHistogramCount reads the sample count of an unlabelled histogram.
func testHistogramCount(t *testing.T, e *env, name string) uint64 {
	t.Helper()
	mfs, err := e.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
