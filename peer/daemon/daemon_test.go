package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	schedd "damselfly/scheduler/daemon"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.uber.org/goleak"

	dhost "damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testImage is one RAFS blob pushed to a registry, with its chunks.
type testImage struct {
	blob   rafs.Digest
	chunks []rafs.Chunk
}

func buildBlob(t *testing.T) (testImage, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 6*rafs.MinChunkSize+123)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := rafs.Build(t.Context(), []rafs.LayerSource{{Name: "l", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}}, rafs.BuildOptions{ChunkSize: rafs.MinChunkSize, BlobDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img := testImage{blob: res.Blobs[0].Digest}
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		img.chunks = append(img.chunks, c)
	}
	slices.SortFunc(img.chunks, func(a, b rafs.Chunk) int { return int(a.Ordinal) - int(b.Ordinal) })
	blob, err := os.ReadFile(rafs.BlobPath(dir, img.blob))
	if err != nil {
		t.Fatal(err)
	}
	return img, blob
}

// flakyRegistry is an in-process registry that can be taken down (503).
type flakyRegistry struct {
	srv  *httptest.Server
	down atomic.Bool
	sent atomic.Int64 // blob bytes served
}

func newRegistry(t *testing.T, blob []byte) *flakyRegistry {
	t.Helper()
	reg := gcrregistry.New(gcrregistry.Logger(nilLogger()))
	f := &flakyRegistry{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			w = countWriter{w, &f.sent}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	repo, err := name.NewRepository(strings.TrimPrefix(f.srv.URL, "http://")+"/test/image", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(repo, static.NewLayer(blob, types.MediaType(rafs.MediaTypeBlob))); err != nil {
		t.Fatal(err)
	}
	return f
}

type countWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func clusterKey(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := dhost.CreateClusterKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// startScheduler runs a scheduler daemon on loopback and returns its
// multiaddr with /p2p/.
func startScheduler(t *testing.T, key string) string {
	t.Helper()
	cfg := schedd.Default(t.TempDir())
	cfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.ClusterKeyFile = key
	cfg.Admin.Listen = "127.0.0.1:0"
	s, err := schedd.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scheduler Run: %v", err)
		}
	})
	ai := s.AddrInfo()
	return fmt.Sprintf("%s/p2p/%s", ai.Addrs[0], ai.ID)
}

func testConfig(t *testing.T, key, sched string) Config {
	cfg := Default()
	cfg.Dir = t.TempDir()
	cfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.ClusterKeyFile = key
	cfg.Proxy.Listen = "127.0.0.1:0"
	cfg.Node.FetchDeadline = 20 * time.Second
	cfg.Node.MaxRetryDelay = 200 * time.Millisecond
	if sched != "" {
		cfg.Scheduler.Schedulers = []string{sched}
		cfg.Scheduler.HeartbeatInterval = 200 * time.Millisecond
	}
	cfg.Labels = map[string]string{"zone": "test"}
	return cfg
}

// startDaemon makes and runs a daemon; cleanup stops it and checks that
// Run returned nil.
func startDaemon(t *testing.T, cfg Config) *Daemon {
	t.Helper()
	d, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon Run: %v", err)
		}
	})
	return d
}

func readThrough(ctx context.Context, d *Daemon, reg string, img testImage) error {
	cc := chunkapi.NewClient(d.ProxyURL(), nil)
	n := 0
	err := cc.ReadChunks(ctx, registry.Ref{Registry: reg, Repo: "test/image"}, img.blob, img.chunks,
		func(i int, c rafs.Chunk, stored []byte) error {
			if i != n {
				return fmt.Errorf("got chunk %d, want %d", i, n)
			}
			n++
			return rafs.DecodeChunk(c, stored, make([]byte, c.Size))
		})
	if err == nil && n != len(img.chunks) {
		err = fmt.Errorf("got %d chunks, want %d", n, len(img.chunks))
	}
	return err
}

func TestTwoPeersAndAScheduler(t *testing.T) {
	t.Parallel()
	img, blob := buildBlob(t)
	reg := newRegistry(t, blob)
	key := clusterKey(t)
	sched := startScheduler(t, key)
	a := startDaemon(t, testConfig(t, key, sched))
	b := startDaemon(t, testConfig(t, key, sched))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	resp, err := http.Get(a.ProxyURL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", resp.StatusCode)
	}

	if err := readThrough(ctx, a, reg.srv.URL, img); err != nil {
		t.Fatalf("read through A: %v", err)
	}
	if s := a.Node().Stats(); s.OriginChunks != int64(len(img.chunks)) {
		t.Errorf("A: %d chunks from origin, want %d", s.OriginChunks, len(img.chunks))
	}
	// The client reads a chunk through B while the registry is up, so
	// that B has the registry's word that it may read the blob. With the
	// registry down, B then gets every chunk from A once the scheduler
	// has A's announcements (B retries until then).
	first := img
	first.chunks = img.chunks[:1]
	if err := readThrough(ctx, b, reg.srv.URL, first); err != nil {
		t.Fatalf("read through B: %v", err)
	}
	reg.down.Store(true)
	if err := readThrough(ctx, b, reg.srv.URL, img); err != nil {
		t.Fatalf("read through B with the registry down: %v", err)
	}
	bs := b.Node().Stats()
	if bs.PeerChunks+bs.OriginChunks != int64(len(img.chunks)) || bs.PeerChunks < int64(len(img.chunks)-1) {
		t.Errorf("B: %d chunks from peers, %d from origin; want %d in all, at most the first from origin", bs.PeerChunks, bs.OriginChunks, len(img.chunks))
	}
	// A's /metrics shows what it uploaded to B: every chunk, but the first
	// if B had that from the origin (before the scheduler heard of A's).
	sent := img.chunks
	if bs.OriginChunks == 1 {
		sent = img.chunks[1:]
	}
	var stored int64
	for _, c := range sent {
		stored += int64(c.CompressedSize)
	}
	for name, want := range map[string]int64{
		"damselfly_exchange_chunks_sent_total": int64(len(sent)),
		"damselfly_exchange_bytes_sent_total":  stored,
	} {
		if got := metricValue(t, a.ProxyURL()+"/metrics", name); got != float64(want) {
			t.Errorf("A's %s: got %v, want %d", name, got, want)
		}
	}
}

// metricValue reads one unlabelled sample from a Prometheus text page.
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("%s has no sample of %s", url, name)
	return 0
}

func TestAlonePeerWithoutScheduler(t *testing.T) {
	t.Parallel()
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct_io=%v", direct), func(t *testing.T) {
			t.Parallel()
			alonePeer(t, direct)
		})
	}
}

// alonePeer reads an image through a peer without a scheduler twice,
// the second time from its cache, read and written with direct I/O or
// not.
func alonePeer(t *testing.T, direct bool) {
	img, blob := buildBlob(t)
	reg := newRegistry(t, blob)
	cfg := testConfig(t, clusterKey(t), "")
	cfg.Cache.DirectIO = direct
	d := startDaemon(t, cfg)
	if got := d.cache.Stats().Direct; got != direct {
		t.Fatalf("cache Direct: got %v, want %v", got, direct)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := readThrough(ctx, d, reg.srv.URL, img); err != nil {
		t.Fatal(err)
	}
	if got := reg.sent.Load(); got != int64(len(blob)) {
		t.Errorf("registry sent %d bytes, want %d", got, len(blob))
	}
	// Read again: all from the cache.
	if err := readThrough(ctx, d, reg.srv.URL, img); err != nil {
		t.Fatal(err)
	}
	if got := reg.sent.Load(); got != int64(len(blob)) {
		t.Errorf("registry sent %d bytes after a second read, want %d", got, len(blob))
	}
	// Every chunk reaches the cache (the writes run behind the reads) and
	// reads back from it.
	for deadline := time.Now().Add(10 * time.Second); d.cache.Stats().Puts < uint64(len(img.chunks)); {
		if time.Now().After(deadline) {
			t.Fatalf("cache puts: %d after 10 s, want %d", d.cache.Stats().Puts, len(img.chunks))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range img.chunks {
		if err := d.cache.ReadChunk(c, make([]byte, c.Size)); err != nil {
			t.Errorf("chunk %s from the cache: %v", c.Digest, err)
		}
	}
}

func TestNewFailsCleanly(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, filepath.Join(t.TempDir(), "missing.key"), "")
	if _, err := New(cfg, nil); err == nil {
		t.Fatal("New with a missing cluster key succeeded")
	}
	// Close without Run releases the listeners.
	cfg = testConfig(t, clusterKey(t), "")
	d, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := Default()
	if err := good.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	bad := Default()
	bad.Dir = ""
	bad.Node.FetchDeadline = 0
	bad.Proxy.Listen = "0.0.0.0:7950"
	bad.Scheduler.Schedulers = []string{"not a multiaddr"}
	bad.MaxBootstrapBytes = 5 << 30
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{"dir", "node", "fetch_deadline", "proxy", `"0.0.0.0:7950" is not a loopback address`, "scheduler", "max_bootstrap_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// The proxy serves loopback only unless told otherwise.
	if host, _, err := net.SplitHostPort(good.Proxy.Listen); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("default proxy listen address %q is not loopback", good.Proxy.Listen)
	}
	remote := Default()
	remote.Proxy.Listen = "0.0.0.0:7950"
	remote.Proxy.AllowRemote = true
	if err := remote.Validate(); err != nil {
		t.Errorf("a non-loopback proxy with allow_remote: %v", err)
	}
}

// The preheater gets the configured bootstrap limit.
// TestCacheDirFollowsStateDir: the node cache is the one the mount
// daemons share by default only with the default state dir; a peer given
// its own state dir gets its own cache, unless cache.dir names one.
func TestCacheDirFollowsStateDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dir, cacheDir, want string }{
		{DefaultDir, "", DefaultCacheDir},
		{DefaultDir + "/", "", DefaultCacheDir},
		{"/srv/peer1", "", "/srv/peer1/cache"},
		{"/srv/peer1", "/fast/cache", "/fast/cache"},
		{DefaultDir, "/fast/cache", "/fast/cache"},
	} {
		cfg := Default()
		cfg.Dir, cfg.Cache.Dir = tc.dir, tc.cacheDir
		if got := cfg.cache().Dir; got != tc.want {
			t.Errorf("dir %q, cache.dir %q: cache in %q, want %q", tc.dir, tc.cacheDir, got, tc.want)
		}
	}
}

func TestConfigPreheatLimit(t *testing.T) {
	t.Parallel()
	c := Default()
	c.MaxBootstrapBytes = 64 << 20
	if got := c.preheat().MaxBootstrapSize; got != 64<<20 {
		t.Errorf("preheat limit: got %d, want %d", got, 64<<20)
	}
}

func nilLogger() *log.Logger { return log.New(io.Discard, "", 0) }
