package fusemount

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/fusemount/backend"
	"damselfly/peer"
	dhost "damselfly/peer/host"
	peerproxy "damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/registry"
)

// TestFetcherThroughRealPeerTailStuck reads through the daemon's backend
// chain and a real local peer (peer.Node behind proxy.Server) whose origin
// serves a run's head but holds every request for its tail: the head's
// reader is served while the tail is stuck, a reader of a tail chunk joins
// the run, and when the origin then refuses the tail, that reader gets
// the error. Nothing here waits on a clock: if the head waited for its
// tail, the read would hang until the test's context ends.
func TestFetcherThroughRealPeerTailStuck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	img := buildPeerImage(t)
	k0, k1 := img.chunks[0], img.chunks[1]

	release := make(chan struct{})
	var released atomic.Bool
	reg := startHookedRegistry(t, img.data, func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.Header.Get("Range"), fmt.Sprintf("bytes=%d-", k0.CompressedOffset)) {
			select { // a tail chunk: held, then refused
			case <-release:
			case <-r.Context().Done():
				return true
			}
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return true
		}
		return false
	})
	url, cacheDir := startRealPeer(t, reg)

	bc := backend.Default()
	bc.Host, bc.Repo = strings.TrimPrefix(reg, "http://"), peerRepo
	bc.Timeout, bc.Deadline = 25*time.Second, 25*time.Second
	bc.Proxy = backend.ProxyConfig{URL: url, Fallback: false, CheckInterval: time.Hour}
	be, err := backend.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	c, err := cache.Open(cache.Default(cacheDir)) // shared with the peer, as in the daemon
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	f, err := NewFetcher(img.boot, c, &backendAdapter{remote: be}, FetcherConfig{AmplifyIO: 4 * rafs.MinChunkSize}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	defer func() {
		if !released.Load() {
			close(release)
		}
	}()

	got := make([]byte, k0.Size)
	if err := f.ReadChunk(ctx, k0, got); err != nil {
		t.Fatalf("head: %v", err)
	}
	if k0.Algo().Sum(got) != k0.Digest {
		t.Fatal("head: wrong bytes")
	}
	if !f.flights.Busy(k1.Index) {
		t.Fatal("chunk 1 is not in flight: the run did not cover the tail")
	}
	tail := make(chan error, 1)
	go func() { tail <- f.ReadChunk(ctx, k1, make([]byte, k1.Size)) }()
	rafstest.Eventually(t, 20*time.Second, "the tail reader to join the run", func() bool { return waiting(f, k1.Index) })
	released.Store(true)
	close(release)
	err = <-tail
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("tail: got %v, want the origin's refusal", err)
	}
	// The peer caches the head, perhaps after the mount got it.
	rafstest.Eventually(t, 20*time.Second, "the head in the node cache", func() bool { return c.Has(cache.KeyOf(k0)) })
	if c.Has(cache.KeyOf(k1)) {
		t.Error("node cache: the tail is there; want the head only")
	}
	if n := c.Stats().Puts; n != 0 {
		t.Errorf("the mount put %d chunks in the node cache; want 0: the peer caches what it serves", n)
	}
}

const peerRepo = "test/peer"

// peerImage is a one-blob image of random 64 KiB chunks.
type peerImage struct {
	boot   *rafs.Bootstrap
	data   []byte
	chunks []rafs.Chunk
}

func buildPeerImage(t *testing.T) peerImage {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	content := make([]byte, 6*rafs.MinChunkSize)
	for i := range content {
		content[i] = byte(r.Uint32())
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := rafs.Build(t.Context(), []rafs.LayerSource{{Name: "l0", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}}, rafs.BuildOptions{ChunkSize: rafs.MinChunkSize, BlobDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	boot, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img := peerImage{boot: boot}
	if img.data, err = os.ReadFile(rafs.BlobPath(dir, res.Blobs[0].Digest)); err != nil {
		t.Fatal(err)
	}
	for i := range boot.ChunkCount() {
		c, err := boot.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		img.chunks = append(img.chunks, c)
	}
	if len(img.chunks) < 4 {
		t.Fatalf("got %d chunks, want at least 4", len(img.chunks))
	}
	return img
}

// startHookedRegistry serves blob from an in-process registry on
// loopback; hook sees every ranged blob GET first and answers it when it
// returns true. It returns the registry's base URL.
func startHookedRegistry(t *testing.T, blob []byte, hook func(http.ResponseWriter, *http.Request) bool) string {
	t.Helper()
	mem := gcrregistry.NewInMemoryBlobHandler()
	sum := sha256.Sum256(blob)
	h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum[:])}
	if err := mem.(gcrregistry.BlobPutHandler).Put(t.Context(), peerRepo, h, io.NopCloser(bytes.NewReader(blob))); err != nil {
		t.Fatal(err)
	}
	reg := gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0)), gcrregistry.WithBlobHandler(mem))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && r.Header.Get("Range") != "" && hook(w, r) {
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startRealPeer runs a peer as peer/daemon builds one (libp2p host on
// loopback, node cache, peer.Node with the upstream client as its origin,
// proxy.Server in front), without a scheduler, stopped at cleanup. Each
// chunk goes to the origin in its own request, and a chunk the origin
// fails transiently is retried for longer than any test runs. It returns
// the proxy's URL and the node cache's directory.
func startRealPeer(t *testing.T, origin string) (url, cacheDir string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "cluster.key")
	if err := dhost.CreateClusterKeyFile(key); err != nil {
		t.Fatal(err)
	}
	h, err := dhost.New(t.Context(), dhost.Loopback(filepath.Join(dir, "identity.key"), key), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, err := cache.Open(cache.Default(filepath.Join(dir, "cache")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := registry.Default()
	rc.DefaultRegistry, rc.Timeout = origin, 25*time.Second
	up, err := registry.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	cfg := peer.DefaultNode()
	cfg.OriginMaxRange = rafs.MinChunkSize
	cfg.FetchDeadline = time.Hour
	n, err := peer.NewNode(cfg, h, c, nil, up, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	pc := peerproxy.Default()
	pc.Listen = "127.0.0.1:0"
	srv, err := peerproxy.New(pc, n, up, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx); err != nil {
			t.Errorf("proxy serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	return srv.URL(), filepath.Join(dir, "cache")
}
