package server

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"damselfly/peer/daemon"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/registry"
)

// preheatRegistry is an in-process registry that counts the blob bytes
// it serves to ranged GETs (chunk fetches) and can hold those requests
// at a gate or refuse them.
type preheatRegistry struct {
	srv        *httptest.Server
	host       string
	rangeBytes atomic.Int64
	down       atomic.Bool

	mu     sync.Mutex
	gate   chan struct{} // nil: open
	inGate atomic.Int64  // ranged GETs waiting at the gate
}

func newPreheatRegistry(t *testing.T) *preheatRegistry {
	t.Helper()
	reg := gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0)))
	p := &preheatRegistry{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ranged := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && r.Header.Get("Range") != ""
		if ranged {
			if p.down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				p.inGate.Add(1)
				select {
				case <-gate:
				case <-r.Context().Done():
				}
				p.inGate.Add(-1)
				if r.Context().Err() != nil {
					return
				}
			}
			w = &countingWriter{ResponseWriter: w, n: &p.rangeBytes}
		}
		reg.ServeHTTP(w, r)
	}))
	// Close the gate first, so that held requests end before the server.
	t.Cleanup(p.srv.Close)
	t.Cleanup(p.open)
	p.host = strings.TrimPrefix(p.srv.URL, "http://")
	return p
}

// hold makes ranged GETs wait until open.
func (p *preheatRegistry) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

func (p *preheatRegistry) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// preheatImage is a RAFS image pushed to a registry.
type preheatImage struct {
	ref       string
	blobBytes int64                        // stored bytes of every chunk
	chunks    map[rafs.Digest][]rafs.Chunk // by blob
	prefetch  int                          // chunks of the prefetch table's files
}

func (i preheatImage) count() int {
	n := 0
	for _, cs := range i.chunks {
		n += len(cs)
	}
	return n
}

// randFile is a regular file of n pseudo-random (incompressible) bytes.
func randFile(name string, seed uint64, n int) rafstest.Entry {
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	return rafstest.Entry{
		Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(n), ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX},
		Data: func(w io.Writer) error { _, err := w.Write(data); return err },
	}
}

// pushPreheatImage converts a two-layer image whose prefetch table holds
// /app/start and pushes it to reg.
func pushPreheatImage(t *testing.T, reg *preheatRegistry) preheatImage {
	t.Helper()
	const c = rafs.MinChunkSize
	dir := func(name string) rafstest.Entry {
		return rafstest.Entry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}}
	}
	src := rafstest.Image{Name: "app", Layers: []rafstest.Layer{
		{dir("bin/"), randFile("bin/big", 1, 6*c+100), dir("lib/"), randFile("lib/x", 2, 3*c)},
		{dir("app/"), randFile("app/start", 3, 2*c+5), randFile("app/data", 4, 4*c)},
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	layout := filepath.Join(t.TempDir(), "oci")
	if err := rafstest.WriteOCILayout(ctx, layout, src); err != nil {
		t.Fatal(err)
	}
	ref := "docker://" + reg.host + "/test/app:rafs"
	if _, err := convert.Convert(ctx, "oci:"+layout+":app", ref, convert.Options{
		Build: rafs.BuildOptions{ChunkSize: c, Prefetch: []string{"/app/start"}}, WorkDir: t.TempDir(),
	}); err != nil {
		t.Fatal(err)
	}
	img, err := image.Open(ctx, ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	b := img.Bootstrap()
	blobs, err := b.Blobs()
	if err != nil {
		t.Fatal(err)
	}
	out := preheatImage{ref: ref, chunks: make(map[rafs.Digest][]rafs.Chunk)}
	for i := range b.ChunkCount() {
		ch, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		d := blobs[ch.Blob].Digest
		out.chunks[d] = append(out.chunks[d], ch)
		out.blobBytes += int64(ch.CompressedSize)
	}
	in, err := b.LookupPath("/app/start")
	if err != nil {
		t.Fatal(err)
	}
	out.prefetch = int(in.DataCount)
	if out.prefetch == 0 || out.prefetch >= out.count() {
		t.Fatalf("image: %d prefetch chunks of %d", out.prefetch, out.count())
	}
	return out
}

// preheatCluster is a scheduler and peer daemons on loopback.
type preheatCluster struct {
	s     *Server
	peers []*daemon.Daemon
	stops []func() // stop peer i and wait for it
}

// startPreheatCluster starts a scheduler and one peer per label set, and
// waits until every peer is a live member.
func startPreheatCluster(t *testing.T, labels ...map[string]string) *preheatCluster {
	t.Helper()
	cfg := testConfig(t)
	cfg.State.OriginTimeout = 5 * time.Second
	cfg.State.WaitRetry = 100 * time.Millisecond
	c := &preheatCluster{s: startServer(t, cfg)}
	ai := c.s.AddrInfo()
	sched := fmt.Sprintf("%s/p2p/%s", ai.Addrs[0], ai.ID)
	for _, l := range labels {
		pc := daemon.Default()
		pc.Dir = t.TempDir()
		pc.Cache.Dir = ""
		pc.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
		pc.Host.InsecureOpenCluster = true
		pc.Proxy.Listen = "127.0.0.1:0"
		pc.Node.FetchDeadline = 20 * time.Second
		pc.Node.MaxRetryDelay = 200 * time.Millisecond
		pc.Scheduler.Schedulers = []string{sched}
		pc.Scheduler.HeartbeatInterval = 200 * time.Millisecond
		pc.Labels = l
		d, err := daemon.New(pc, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("peer Run: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		c.peers = append(c.peers, d)
		c.stops = append(c.stops, stop)
	}
	rafstest.Eventually(t, 20*time.Second, "every peer to register", func() bool {
		n := 0
		for _, p := range c.s.State().Peers(time.Now()) {
			if p.Alive {
				n++
			}
		}
		return n == len(labels)
	})
	return c
}

// postPreheat starts a job and returns its ID.
func postPreheat(t *testing.T, s *Server, body string) PreheatJSON {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.AdminURL()+"/api/v1/preheat", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST preheat %s: got %d %s, want 202", body, resp.StatusCode, b)
	}
	var j PreheatJSON
	decode(t, string(b), &j)
	return j
}

func getPreheat(t *testing.T, s *Server, id string) PreheatJSON {
	t.Helper()
	var j PreheatJSON
	decode(t, do(t, http.MethodGet, s.AdminURL()+"/api/v1/preheat/"+id, http.StatusOK), &j)
	return j
}

// waitPreheat polls a job until it ended.
func waitPreheat(t *testing.T, s *Server, id string) PreheatJSON {
	t.Helper()
	var j PreheatJSON
	poll(t, "the preheat to end", func() bool {
		j = getPreheat(t, s, id)
		return j.State != preheatRunning
	})
	return j
}

// readAllCached reads every chunk of img through d's node and reports
// how many came from its cache; the registry should be down.
func readAllCached(ctx context.Context, d *daemon.Daemon, reg *preheatRegistry, img preheatImage) (int64, error) {
	before := d.Node().Stats().CacheChunks
	for blob, cs := range img.chunks {
		up := upstreamRef(reg)
		if err := d.Node().ReadChunks(ctx, up, blob, cs, func(int, rafs.Chunk, []byte) error { return nil }); err != nil {
			return 0, err
		}
	}
	return d.Node().Stats().CacheChunks - before, nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// upstreamRef is where reg's test image's blobs are.
func upstreamRef(reg *preheatRegistry) registry.Ref {
	return registry.Ref{Registry: reg.srv.URL, Repo: "test/app"}
}

// poll calls cond until it holds, failing t after 30 s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
