package peer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"damselfly/peer/exchange"
	"damselfly/peer/fetch"
	dhost "damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
	"damselfly/rafs/route"
	"damselfly/scheduler"
)

// image is a small RAFS image built for a test: one blob and its chunks
// in ordinal order.
type image struct {
	dir    string // blob directory
	blob   rafs.Digest
	chunks []rafs.Chunk
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		// Half random, half text, so some chunks compress and some not.
		if (i/4096)%2 == 0 {
			b[i] = byte(r.Uint32())
		} else {
			b[i] = "damselfly "[r.IntN(10)]
		}
	}
	return b
}

// buildImage builds a one-layer image of a few files in 64 KiB chunks.
func buildImage(t testing.TB) image {
	t.Helper()
	return buildImageSeed(t, 0)
}

// buildImageSeed is buildImage with other content for each seed: another
// blob.
func buildImageSeed(t testing.TB, seed uint64) image {
	t.Helper()
	return buildImageOpts(t, seed, rafs.DefaultDigest, false)
}

// buildImageOpts is buildImageSeed with chunks digested by algo, and of
// content that compresses (text of random letters) when text is set.
func buildImageOpts(t testing.TB, seed uint64, algo rafs.DigestAlgo, text bool) image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, size := range []int{5*rafs.MinChunkSize + 100, 3 * rafs.MinChunkSize, 2*rafs.MinChunkSize + 7} {
		data := randBytes(seed<<8+uint64(i+1), size)
		if text {
			for j := range data {
				data[j] = 'a' + data[j]%8
			}
		}
		h := &tar.Header{Name: fmt.Sprintf("f%d", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)),
			ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	layer := rafs.LayerSource{Name: "layer0", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}
	res, err := rafs.Build(t.Context(), []rafs.LayerSource{layer}, rafs.BuildOptions{ChunkSize: rafs.MinChunkSize, BlobDir: dir, BatchSize: -1, Digest: algo})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Blobs) != 1 {
		t.Fatalf("got %d blobs, want 1", len(res.Blobs))
	}
	img := image{dir: dir, blob: res.Blobs[0].Digest}
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		img.chunks = append(img.chunks, c)
	}
	slices.SortFunc(img.chunks, func(a, b rafs.Chunk) int { return int(a.Ordinal) - int(b.Ordinal) })
	if len(img.chunks) < 8 {
		t.Fatalf("image has %d chunks, want at least 8", len(img.chunks))
	}
	return img
}

func storedBytes(cs []rafs.Chunk) int64 {
	var n int64
	for _, c := range cs {
		n += int64(c.CompressedSize)
	}
	return n
}

// origin is an HTTP server that serves the blob files of a directory with
// Range, and can be taken down; it counts the body bytes it sent.
type origin struct {
	srv   *httptest.Server
	dir   string
	down  atomic.Bool
	code  atomic.Int32 // status while down; 503 unless set
	bytes atomic.Int64
	reqs  atomic.Int64
	delay atomic.Int64 // before answering, in ns
}

func newOrigin(t testing.TB, dir string) *origin {
	o := &origin{dir: dir}
	o.srv = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	o.reqs.Add(1)
	if d := time.Duration(o.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	if o.down.Load() {
		code := int(o.code.Load())
		if code == 0 {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, "down", code)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/blobs/")
	f, err := os.Open(filepath.Join(o.dir, filepath.Base(name)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	http.ServeContent(countingWriter{w, &o.bytes}, r, "", time.Time{}, f)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// ref is the upstream reference of the test origin.
func (o *origin) ref() registry.Ref { return registry.Ref{Registry: o.srv.URL, Repo: "test/image"} }

// httpOrigin is a peer.Origin over the test origin, with the upstream
// client's error types.
type httpOrigin struct{ dir string }

func (httpOrigin) ReadRange(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref.Registry+"/blobs/"+hexOf(blob), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return &registry.StatusError{Code: resp.StatusCode, Msg: resp.Status}
	}
	_, err = io.ReadFull(resp.Body, p)
	return err
}

func hexOf(d rafs.Digest) string { return fmt.Sprintf("%x", d[:]) }

// router is a Router over a real scheduler.State, acting for one peer, as
// the scheduler client and daemon would. It can be taken down.
type router struct {
	st   *scheduler.State
	id   lpeer.ID
	down atomic.Bool

	mu        sync.Mutex
	announced map[rafs.Digest][]uint32
	dropped   map[rafs.Digest][]uint32
	reports   []route.Outcome
}

var _ fetch.Router = (*router)(nil)

func newRouter(t testing.TB, st *scheduler.State, h *dhost.Host) *router {
	t.Helper()
	var addrs []string
	for _, a := range h.Addrs() {
		addrs = append(addrs, a.String())
	}
	if err := st.Register(h.ID().String(), scheduler.PeerInfo{Addrs: addrs}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return &router{st: st, id: h.ID(), announced: map[rafs.Digest][]uint32{}, dropped: map[rafs.Digest][]uint32{}}
}

func (r *router) Route(ctx context.Context, blob rafs.Digest, chunks []uint32, _ uint64) (route.Route, error) {
	if r.down.Load() {
		return route.Route{}, fmt.Errorf("test router down: %w", route.ErrNoRoute)
	}
	ans, err := r.st.Parents(r.id.String(), blob, chunks, time.Now())
	if err != nil {
		return route.Route{}, err
	}
	var out route.Route
	for _, p := range ans.Parents {
		id, err := lpeer.Decode(p.ID)
		if err != nil {
			return route.Route{}, err
		}
		info := lpeer.AddrInfo{ID: id}
		for _, a := range p.Addrs {
			m, err := ma.NewMultiaddr(a)
			if err != nil {
				return route.Route{}, err
			}
			info.Addrs = append(info.Addrs, m)
		}
		out.Parents = append(out.Parents, route.Parent{Info: info, Chunks: p.Chunks})
	}
	out.Origin = ans.Origin
	for _, w := range ans.Wait {
		out.Wait = append(out.Wait, route.Wait{Chunks: w.Chunks, RetryAfter: w.RetryAfter})
	}
	return out, nil
}

func (r *router) Announce(blob rafs.Digest, chunks []uint32) {
	r.mu.Lock()
	r.announced[blob] = append(r.announced[blob], chunks...)
	r.mu.Unlock()
	if _, err := r.st.Announce(r.id.String(), blob, chunks, time.Now()); err != nil {
		panic(err)
	}
}

func (r *router) Drop(blob rafs.Digest, chunks []uint32) {
	r.mu.Lock()
	r.dropped[blob] = append(r.dropped[blob], chunks...)
	r.mu.Unlock()
	_, _ = r.st.Drop(r.id.String(), blob, chunks, time.Now())
}

func (r *router) Abandon(blob rafs.Digest, chunks []uint32) {
	_, _ = r.st.AbandonOrigin(r.id.String(), blob, chunks, time.Now())
}

func (r *router) Report(parent lpeer.ID, o route.Outcome) {
	r.mu.Lock()
	r.reports = append(r.reports, o)
	r.mu.Unlock()
	_, _ = r.st.Report(r.id.String(), parent.String(), scheduler.Outcome{
		Blob: o.Blob, Bytes: o.Bytes, Duration: o.Duration, OK: o.OK,
		BadBytes: o.BadBytes, BadChunk: o.BadChunk, Missing: o.Missing,
	}, time.Now())
}

func (r *router) snapshot() (announced, dropped map[rafs.Digest][]uint32, reports []route.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	announced, dropped = map[rafs.Digest][]uint32{}, map[rafs.Digest][]uint32{}
	for b, o := range r.announced {
		announced[b] = slices.Clone(o)
	}
	for b, o := range r.dropped {
		dropped[b] = slices.Clone(o)
	}
	return announced, dropped, slices.Clone(r.reports)
}

// node is one test peer: host, cache, exchange server, router and Node.
type node struct {
	h      *dhost.Host
	cache  *cache.Cache
	srv    *exchange.Server
	router *router
	wrap   func(*router) fetch.Router
	*Node
	stop func() // stops Run and closes the Node
}

type nodeOpts struct {
	cfg      func(*NodeConfig)
	noVerify bool
	cacheDir string
	// cacheCapacity caps the node cache (0: unlimited).
	cacheCapacity int64
	// store wraps the cache as the exchange server's Store, for a peer
	// that misbehaves when it serves (nil: the cache itself).
	store func(*cache.Cache) exchange.Store
	// server edits the exchange server's configuration.
	server func(*exchange.ServerConfig)
	// router wraps the node's test router (nil: the router itself).
	router func(*router) fetch.Router
}

func newScheduler(t testing.TB) *scheduler.State {
	t.Helper()
	return newSchedulerWith(t, nil)
}

// newSchedulerWith is newScheduler with its config changed by set.
func newSchedulerWith(t testing.TB, set func(*scheduler.Config)) *scheduler.State {
	t.Helper()
	cfg := scheduler.Default()
	cfg.Jitter = 0
	if set != nil {
		set(&cfg)
	}
	st, err := scheduler.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// newNode starts a peer on loopback in the cluster of keyFile, registered
// with st.
func newNode(t testing.TB, keyFile string, st *scheduler.State, o nodeOpts) *node {
	t.Helper()
	hc := dhost.Loopback(filepath.Join(t.TempDir(), "identity.key"), keyFile)
	hc.DialTimeout = 5 * time.Second
	h, err := dhost.New(t.Context(), hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := o.cacheDir
	if dir == "" {
		dir = t.TempDir()
	}
	ccfg := cache.Default(dir)
	ccfg.Capacity = o.cacheCapacity
	c, err := cache.Open(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var store exchange.Store = c
	if o.store != nil {
		store = o.store(c)
	}
	scfg := exchange.DefaultServerConfig()
	scfg.NoVerify = o.noVerify
	if o.server != nil {
		o.server(&scfg)
	}
	srv, err := exchange.NewServer(h, store, scfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	n := &node{h: h, cache: c, srv: srv, router: newRouter(t, st, h), wrap: o.router}
	n.start(t, o.cfg)
	return n
}

// start makes and runs a Node over n's host and cache.
func (n *node) start(t testing.TB, edit func(*NodeConfig)) {
	t.Helper()
	cfg := testConfig()
	if edit != nil {
		edit(&cfg)
	}
	var r fetch.Router = n.router
	if n.wrap != nil {
		r = n.wrap(n.router)
	}
	nd, err := NewNode(cfg, n.h, n.cache, r, httpOrigin{}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nd.Run(ctx) }()
	var once sync.Once
	n.Node = nd
	n.srv.SetMissHook(nd.Missed) // as the daemon does
	n.srv.SetPartOfHook(nd.PartOf)
	n.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := nd.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	t.Cleanup(n.stop)
}

func testConfig() NodeConfig {
	cfg := DefaultNode()
	cfg.FetchDeadline = 10 * time.Second
	cfg.ParentTimeout = 10 * time.Second
	cfg.MaxRetryDelay = 200 * time.Millisecond
	return cfg
}

// readAll reads cs through n and checks that every chunk comes in order
// and decodes to its digest.
func readAll(ctx context.Context, n *Node, up registry.Ref, blob rafs.Digest, cs []rafs.Chunk) error {
	next := 0
	return n.ReadChunks(ctx, up, blob, cs, func(i int, c rafs.Chunk, stored []byte) error {
		if i != next {
			return fmt.Errorf("delivered chunk %d, want %d", i, next)
		}
		next++
		if c.Digest != cs[i].Digest || c.Ordinal != cs[i].Ordinal {
			return fmt.Errorf("chunk %d: delivered another chunk", i)
		}
		if int(c.CompressedSize) != len(stored) {
			return fmt.Errorf("chunk %d: %d stored bytes, CompressedSize %d", i, len(stored), c.CompressedSize)
		}
		if err := rafs.DecodeChunk(c, stored, make([]byte, c.Size)); err != nil {
			return fmt.Errorf("chunk %d: %w", i, err)
		}
		return nil
	})
}

func clusterKey(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := dhost.CreateClusterKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var _ = errors.Is

var errCanceled = context.Canceled

func contextWithCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

// testLog logs at debug level to stderr with -v, and nowhere otherwise.
func testLog() *slog.Logger {
	if !testing.Verbose() {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
