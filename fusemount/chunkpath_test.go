package fusemount

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/fusemount/backend"
	peerproxy "damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/registry"
)

// chunkBackend is the daemon's backend over an OCI layout with the
// chunk-run capability, and optional tampering with what it delivers:
// tamper may replace a delivered chunk (its description and bytes).
type chunkBackend struct {
	*backendAdapter
	tamper func(i int, c rafs.Chunk, stored []byte) (rafs.Chunk, []byte)

	ranges, runs atomic.Int64
}

func (b *chunkBackend) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	b.ranges.Add(1)
	return b.backendAdapter.ReadBlobFrom(ctx, blob, off, p)
}

func (b *chunkBackend) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) (string, error) {
	b.runs.Add(1)
	return b.backendAdapter.ReadChunksFrom(ctx, blob, chunks, func(i int, c rafs.Chunk, stored []byte) error {
		if b.tamper != nil {
			c, stored = b.tamper(i, c, bytes.Clone(stored))
		}
		return deliver(i, c, stored)
	})
}

// rangeOnly hides the chunk-run capability.
type rangeOnly struct{ b *chunkBackend }

func (r rangeOnly) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	return r.b.ReadBlobFrom(ctx, blob, off, p)
}

// fetcherFixture is the sizes image of the corpus, its chunks as the
// image's own verified source reads them, and a backend over its layout.
type fetcherFixture struct {
	layout string
	boot   *rafs.Bootstrap
	want   map[uint32][]byte // chunk index -> content
	be     *chunkBackend
}

func newFetcherFixture(t *testing.T) *fetcherFixture {
	t.Helper()
	return newFetcherFixtureOf(t, "sizes-rafs")
}

// newFetcherFixtureOf is newFetcherFixture over the corpus image tagged
// tag: "sizes-rafs" (the default conversion) or "sizes-rafs-blake3".
func newFetcherFixtureOf(t *testing.T, tag string) *fetcherFixture {
	t.Helper()
	layout, _ := corpusLayout(t)
	img, err := image.Open(t.Context(), "oci:"+layout+":"+tag, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	fx := &fetcherFixture{layout: layout, boot: img.Bootstrap(), want: map[uint32][]byte{}}
	for i := range fx.boot.ChunkCount() {
		c, err := fx.boot.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, c.Size)
		if err := img.ChunkSource().ReadChunk(t.Context(), c, buf); err != nil {
			t.Fatal(err)
		}
		fx.want[i] = buf
	}
	if len(fx.want) < 8 {
		t.Fatalf("the sizes image has %d chunks, want several runs' worth", len(fx.want))
	}
	be, err := backend.New(backend.OCI(layout))
	if err != nil {
		t.Fatal(err)
	}
	fx.be = &chunkBackend{backendAdapter: &backendAdapter{remote: be}}
	t.Cleanup(func() { be.Close() })
	return fx
}

func (fx *fetcherFixture) fetcher(t *testing.T, be Backend, c *cache.Cache) (*Fetcher, *Metrics) {
	t.Helper()
	m := NewMetrics()
	f, err := NewFetcher(fx.boot, c, be, FetcherConfig{AmplifyIO: 256 << 10}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f, m
}

// readAll reads every chunk through f, in index order (so runs merge),
// and compares it with the image's own.
func (fx *fetcherFixture) readAll(t *testing.T, f *Fetcher) {
	t.Helper()
	for i := range fx.boot.ChunkCount() {
		c, err := fx.boot.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, c.Size)
		if err := f.ReadChunk(t.Context(), c, got); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if !bytes.Equal(got, fx.want[i]) {
			t.Fatalf("chunk %d: wrong bytes", i)
		}
	}
}

func openCache(t *testing.T, dir string) *cache.Cache {
	t.Helper()
	c, err := cache.Open(cache.Default(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func counter(m *Metrics, name string) float64 {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			sum += x.GetCounter().GetValue()
		}
	}
	return sum
}

// A backend with the chunk-run capability is asked for runs; one without
// it for byte ranges; both give the image's bytes and fill the cache.
func TestFetcherChunkRuns(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	local := &backendAdapter{local: rafs.NewDirBlobs(filepath.Join(fx.layout, "blobs", "sha256"))}
	t.Cleanup(func() { local.Close() })
	for _, tt := range []struct {
		name     string
		cb       *chunkBackend
		wantRuns bool
	}{
		{"chunk runs", fx.be, true},
		{"byte ranges", fx.be, false},
		{"chunk runs from a blob directory", &chunkBackend{backendAdapter: local}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cb.runs.Store(0)
			tt.cb.ranges.Store(0)
			var be Backend = tt.cb
			if !tt.wantRuns {
				be = rangeOnly{tt.cb}
			}
			c := openCache(t, t.TempDir())
			f, m := fx.fetcher(t, be, c)
			fx.readAll(t, f)
			runs, ranges := tt.cb.runs.Load(), tt.cb.ranges.Load()
			if tt.wantRuns && (runs == 0 || ranges != 0) || !tt.wantRuns && (runs != 0 || ranges == 0) {
				t.Errorf("backend calls: got %d runs, %d ranges", runs, ranges)
			}
			if n := int64(fx.boot.ChunkCount()); runs+ranges >= n {
				t.Errorf("backend calls: got %d for %d chunks, want adjacent chunks merged", runs+ranges, n)
			}
			if got := counter(m, "damselfly_mount_backend_bytes_total"); got <= 0 {
				t.Errorf("backend bytes: got %v, want them counted", got)
			}
			for i := range fx.boot.ChunkCount() {
				k, _ := fx.boot.Chunk(i)
				if !c.Has(cache.KeyOf(k)) {
					t.Errorf("chunk %d not in the node cache", i)
				}
			}
		})
	}
}

// A chunk delivered corrupt never reaches the reader: it is counted,
// fetched again, and the reader gets the right bytes; when it stays
// corrupt the read fails with the digest mismatch.
func TestFetcherChunkRunCorrupt(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	var (
		mu      sync.Mutex
		target  rafs.Digest
		corrupt = 1 // times left to corrupt the target
	)
	k0, _ := fx.boot.Chunk(2)
	target = k0.Digest
	be := &chunkBackend{backendAdapter: fx.be.backendAdapter, tamper: func(i int, c rafs.Chunk, stored []byte) (rafs.Chunk, []byte) {
		mu.Lock()
		defer mu.Unlock()
		if c.Digest == target && corrupt > 0 {
			corrupt--
			stored[len(stored)/2] ^= 0x55
		}
		return c, stored
	}}
	c := openCache(t, t.TempDir())
	f, m := fx.fetcher(t, be, c)
	fx.readAll(t, f)
	if got := counter(m, "damselfly_mount_verify_failures_total"); got != 1 {
		t.Errorf("verify failures: got %v, want 1", got)
	}

	// Always corrupt: the read fails and nothing is cached.
	k, _ := fx.boot.Chunk(5)
	mu.Lock()
	target, corrupt = k.Digest, 1<<30
	mu.Unlock()
	f2, _ := fx.fetcher(t, be, openCache(t, t.TempDir()))
	err := f2.ReadChunk(t.Context(), k, make([]byte, k.Size))
	if !errors.Is(err, rafs.ErrDigestMismatch) {
		t.Fatalf("got %v, want a digest mismatch", err)
	}
}

// A chunk delivered in the other form (raw for a compressed one) is
// verified and cached in that form, and the cache serves it, when chunks
// are named by their content (blake3). Named by their stored bytes (the
// default), the other form is not the chunk: it is refused.
func TestFetcherChunkRunOtherForm(t *testing.T) {
	t.Parallel()
	toRaw := func(converted *atomic.Int64) func(int, rafs.Chunk, []byte) (rafs.Chunk, []byte) {
		return func(i int, c rafs.Chunk, stored []byte) (rafs.Chunk, []byte) {
			if !c.Compressed() {
				return c, stored
			}
			raw := make([]byte, c.Size)
			if err := rafs.DecodeChunk(c, stored, raw); err != nil {
				return c, stored // let the fetcher report it
			}
			converted.Add(1)
			c.Flags &^= rafs.ChunkCompressed
			c.CompressedSize = c.Size
			return c, raw
		}
	}
	t.Run("blake3", func(t *testing.T) {
		t.Parallel()
		fx := newFetcherFixtureOf(t, "sizes-rafs-blake3")
		var converted atomic.Int64
		be := &chunkBackend{backendAdapter: fx.be.backendAdapter, tamper: toRaw(&converted)}
		dir := t.TempDir()
		f, _ := fx.fetcher(t, be, openCache(t, dir))
		fx.readAll(t, f)
		if converted.Load() == 0 {
			t.Fatal("no compressed chunk in the image: the test proves nothing")
		}
		// A second mount over the same node cache reads everything from it.
		be2 := &chunkBackend{backendAdapter: fx.be.backendAdapter}
		f2, m2 := fx.fetcher(t, be2, openCache(t, dir))
		fx.readAll(t, f2)
		if n := be2.runs.Load() + be2.ranges.Load(); n != 0 {
			t.Errorf("backend calls from a warm cache: got %d, want 0", n)
		}
		if got := counter(m2, "damselfly_mount_cache_hits_total"); got != float64(fx.boot.ChunkCount()) {
			t.Errorf("cache hits: got %v, want %d", got, fx.boot.ChunkCount())
		}
	})
	t.Run("blake3-stored", func(t *testing.T) {
		t.Parallel()
		fx := newFetcherFixture(t)
		var k rafs.Chunk
		for i := range fx.boot.ChunkCount() {
			c, err := fx.boot.Chunk(i)
			if err != nil {
				t.Fatal(err)
			}
			if c.Compressed() {
				k = c
				break
			}
		}
		if !k.Compressed() || !k.StoredDigest() {
			t.Fatalf("want a compressed blake3-stored chunk in the default conversion, got flags %#x", k.Flags)
		}
		var converted atomic.Int64
		be := &chunkBackend{backendAdapter: fx.be.backendAdapter, tamper: toRaw(&converted)}
		f, _ := fx.fetcher(t, be, openCache(t, t.TempDir()))
		err := f.ReadChunk(t.Context(), k, make([]byte, k.Size))
		if converted.Load() == 0 {
			t.Fatal("the backend sent no chunk in the other form: the test proves nothing")
		}
		if !errors.Is(err, rafs.ErrDigestMismatch) {
			t.Fatalf("a compressed chunk delivered raw: got %v, want a digest mismatch", err)
		}
	})
}

// mountPeer is a ChunkSource for a real proxy.Server in front of a
// registry: it reads each chunk by range through registry.Client and
// verifies it, like the peer's origin path. failAt (a blob ordinal + 1)
// fails the first request reaching that chunk once, transiently;
// corrupt (ordinal + 1) sends that chunk with a flipped byte, once.
type mountPeer struct {
	up      *registry.Client
	failAt  atomic.Int64
	corrupt atomic.Int64
	served  atomic.Int64
	midway  atomic.Int64 // failures injected after delivering part of a batch
}

func (p *mountPeer) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	for i, c := range chunks {
		if o := int64(c.Ordinal) + 1; p.failAt.Load() == o && p.failAt.CompareAndSwap(o, 0) {
			if i > 0 {
				p.midway.Add(1)
			}
			return &chunkapi.ChunkError{Index: i, Transient: true, Err: errors.New("injected: no peer holds it, origin busy")}
		}
		stored := make([]byte, c.CompressedSize)
		if err := p.up.ReadRange(ctx, up, blob, int64(c.CompressedOffset), stored); err != nil {
			return &chunkapi.ChunkError{Index: i, Transient: registry.IsTransient(err), Err: err}
		}
		if o := int64(c.Ordinal) + 1; p.corrupt.Load() == o && p.corrupt.CompareAndSwap(o, 0) {
			stored[len(stored)/2] ^= 0x55
		} else if err := rafs.DecodeChunk(c, stored, make([]byte, c.Size)); err != nil {
			return &chunkapi.ChunkError{Index: i, Err: err}
		}
		p.served.Add(1) // before deliver: it returns after the client may have read it all
		if err := deliver(i, c, stored); err != nil {
			return err
		}
	}
	return nil
}

// startMountPeer runs a proxy.Server for registry host with peer as its
// chunk source until stop is called or the test ends; it returns the
// server's URL.
func startMountPeer(t *testing.T, host string, peer *mountPeer) (url string, stop func()) {
	t.Helper()
	rc := registry.Default()
	rc.DefaultRegistry = "http://" + host
	up, err := registry.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	peer.up = up
	pc := peerproxy.Default()
	pc.Listen = "127.0.0.1:0"
	srv, err := peerproxy.New(pc, peer, up, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy serve: %v", err)
		}
		up.Close()
	})
	t.Cleanup(stop)
	return srv.URL(), stop
}

// TestMountThroughPeer mounts an image from a real registry with a real
// proxy.Server as the local peer: every file reads back equal to the
// image, through the batch endpoint; a transient failure part-way through
// a batch sends the rest to the registry, as does a peer that went away;
// a chunk the peer sends corrupt never reaches a reader.
func TestMountThroughPeer(t *testing.T) {
	requireFUSE(t)
	host := rafstest.StartRegistry(t)
	layout, _ := corpusLayout(t)
	ref := copyToRegistry(t, layout, "sizes-rafs", host)
	local := "oci:" + layout + ":sizes-rafs"

	mount := func(t *testing.T, peer *mountPeer, fallback bool) (string, *Daemon, func()) {
		cfg := testConfig(t)
		cfg.Prefetch.Enable = false
		// Only the probe at start: a later one turning the peer healthy
		// again would make where the rest of a failed run goes a race.
		cfg.Backend.Proxy.CheckInterval = time.Hour
		url, stop := startMountPeer(t, host, peer)
		cfg.Backend.Proxy.URL = url
		cfg.Backend.Proxy.PingURL = url + "/healthz"
		cfg.Backend.Proxy.Fallback = fallback
		mp, d, _ := mountT(t, Options{Image: ref, Config: cfg})
		return mp, d, stop
	}
	t.Run("all through the peer", func(t *testing.T) {
		peer := &mountPeer{}
		mp, d, _ := mount(t, peer, false)
		readEverything(t, mp, local)
		st := d.Status(mp)
		if st.Backend[SourceProxy] == 0 || st.Backend[SourceRegistry] != 0 || st.Errors != 0 {
			t.Errorf("backend bytes %v, errors %d: want all through the peer, no errors", st.Backend, st.Errors)
		}
		if peer.served.Load() == 0 {
			t.Error("the peer served no chunks")
		}
	})
	t.Run("peer gone after mounting", func(t *testing.T) {
		peer := &mountPeer{}
		mp, d, stop := mount(t, peer, true)
		stop() // the health probe saw it up; the first read finds it gone
		readEverything(t, mp, local)
		st := d.Status(mp)
		if st.Backend[SourceRegistry] == 0 || st.Backend[SourceProxy] != 0 || st.Errors != 0 {
			t.Errorf("backend bytes %v, errors %d: want all from the registry, no errors", st.Backend, st.Errors)
		}
	})
	t.Run("transient failure mid-batch", func(t *testing.T) {
		peer := &mountPeer{}
		peer.failAt.Store(3) // the chunk at ordinal 2 of the first blob that reaches it
		mp, d, _ := mount(t, peer, true)
		readEverything(t, mp, local)
		st := d.Status(mp)
		if peer.failAt.Load() != 0 {
			t.Fatal("the failure was never injected")
		}
		if st.Backend[SourceRegistry] == 0 || st.Errors != 0 {
			t.Errorf("backend bytes %v, errors %d: want the rest from the registry, no errors", st.Backend, st.Errors)
		}
		t.Logf("failures injected part-way through a batch: %d; backend bytes %v", peer.midway.Load(), st.Backend)
	})
	t.Run("corrupt chunk", func(t *testing.T) {
		peer := &mountPeer{}
		peer.corrupt.Store(2)
		mp, d, _ := mount(t, peer, true)
		readEverything(t, mp, local)
		st := d.Status(mp)
		if peer.corrupt.Load() != 0 {
			t.Fatal("the corruption was never injected")
		}
		if st.Errors != 0 || st.Backend[SourceRegistry] == 0 {
			t.Errorf("backend bytes %v, errors %d: want the chunk from the registry, no errors", st.Backend, st.Errors)
		}
	})
}

// A backend request that took slowRead or more is logged with its run and
// source; quicker ones are not.
func TestSlowChunkReadLogged(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	for _, tc := range []struct {
		slow time.Duration
		want bool
	}{{time.Hour, false}, {time.Nanosecond, true}} {
		var buf bytes.Buffer
		f, err := NewFetcher(fx.boot, nil, fx.be, FetcherConfig{AmplifyIO: 256 << 10}, nil, slog.New(slog.NewTextHandler(&buf, nil)))
		if err != nil {
			t.Fatal(err)
		}
		f.slowRead = tc.slow
		fx.readAll(t, f)
		f.Close()
		out := buf.String()
		if got := strings.Contains(out, `msg="slow chunk read"`); got != tc.want {
			t.Fatalf("slowRead %v: logged %v, want %v:\n%s", tc.slow, got, tc.want, out)
		}
		if tc.want && (!strings.Contains(out, "first_chunk=0 ") || !strings.Contains(out, "delivered=") || !strings.Contains(out, "source=")) {
			t.Errorf("log lacks the run's details:\n%s", out)
		}
	}
}
