package backend

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	peerproxy "damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/registry"
)

// chunkedBlob is a blob made of raw (uncompressed) chunks of the given
// sizes, with their descriptions as a bootstrap would give them.
type chunkedBlob struct {
	data   []byte
	blob   rafs.Blob
	chunks []rafs.Chunk
}

func newChunkedBlob(seed uint64, sizes ...int) chunkedBlob {
	var cb chunkedBlob
	for i, n := range sizes {
		part := randomBytes(seed+uint64(i), n)
		cb.chunks = append(cb.chunks, rafs.Chunk{
			Index: uint32(i), Digest: sha256.Sum256(part), CompressedOffset: uint64(len(cb.data)),
			CompressedSize: uint32(n), Size: uint32(n), Ordinal: uint32(i),
		})
		cb.data = append(cb.data, part...)
	}
	cb.blob = rafs.Blob{Digest: sha256.Sum256(cb.data), CompressedSize: uint64(len(cb.data)), ChunkCount: uint32(len(sizes))}
	return cb
}

// collector is a DeliverFunc that verifies every chunk and keeps its
// bytes, failing on out-of-order or repeated delivery.
type collector struct {
	t    *testing.T
	got  [][]byte
	next int
}

func (c *collector) deliver(cb chunkedBlob) DeliverFunc {
	c.got = make([][]byte, len(cb.chunks))
	return func(i int, k rafs.Chunk, stored []byte) error {
		if i != c.next {
			c.t.Errorf("delivered chunk %d, want %d", i, c.next)
		}
		c.next = i + 1
		dec := make([]byte, k.Size)
		if err := rafs.DecodeChunk(k, stored, dec); err != nil {
			return err
		}
		c.got[i] = dec
		return nil
	}
}

func (c *collector) check(cb chunkedBlob) {
	c.t.Helper()
	for i, k := range cb.chunks {
		want := cb.data[k.CompressedOffset:][:k.CompressedSize]
		if !bytes.Equal(c.got[i], want) {
			c.t.Errorf("chunk %d: got %d bytes, want its %d bytes", i, len(c.got[i]), len(want))
		}
	}
}

func TestReadChunksRegistry(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(60, 3000, 1, 70000, 4096, 12345)
	o.put(t, cb.data)
	b := newBackend(t, o.config(), WithClock(newStepClock()))
	c := &collector{t: t}
	src, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb))
	if err != nil || src != SourceRegistry {
		t.Fatalf("got %s, %v; want %s, nil", src, err, SourceRegistry)
	}
	c.check(cb)
	if st := b.Stats().Registry; st.Requests != 1 || st.Bytes != uint64(len(cb.data)) {
		t.Errorf("stats: got %+v, want 1 request of %d bytes", st, len(cb.data))
	}
	// A run from the middle of the blob.
	c = &collector{t: t}
	mid := chunkedBlob{data: cb.data, blob: cb.blob, chunks: cb.chunks[2:4]}
	if _, err := b.ReadChunksFrom(t.Context(), cb.blob, mid.chunks, c.deliver(mid)); err != nil {
		t.Fatal(err)
	}
	c.check(mid)
}

func TestReadChunksOCI(t *testing.T) {
	t.Parallel()
	cb := newChunkedBlob(61, 100, 5000, 7)
	dir, blobs := writeLayout(t, cb.data)
	b := newBackend(t, OCI(dir))
	c := &collector{t: t}
	src, err := b.ReadChunksFrom(t.Context(), blobs[0], cb.chunks, c.deliver(cb))
	if err != nil || src != SourceOCI {
		t.Fatalf("got %s, %v; want %s, nil", src, err, SourceOCI)
	}
	c.check(cb)
	if st := b.Stats().OCI; st.Requests != 1 || st.Bytes != uint64(len(cb.data)) {
		t.Errorf("stats: got %+v, want 1 read of %d bytes", st, len(cb.data))
	}
}

// A proxy that cannot be reached sends the run to the registry; one that
// is up serves it.
func TestReadChunksProxyAndFallback(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(62, 20000, 30000, 10)
	o.put(t, cb.data)

	cfg := o.config()
	cfg.Proxy = ProxyConfig{URL: "http://" + closedPort(t), Fallback: true, CheckInterval: time.Hour}
	b := newBackend(t, cfg)
	c := &collector{t: t}
	src, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb))
	if err != nil || src != SourceRegistry {
		t.Fatalf("proxy down: got %s, %v; want %s, nil", src, err, SourceRegistry)
	}
	c.check(cb)
	// The health checker's first probe may find the proxy down before the
	// read tries it: then the read goes to the registry without a failed
	// attempt.
	if st := b.Stats(); st.ProxyHealthy || st.Proxy.Errors > 1 || st.Fallbacks != 1 || st.Registry.Bytes != uint64(len(cb.data)) {
		t.Errorf("proxy down: stats %+v, want at most one failed proxy attempt, then the registry", st)
	}

	before := o.gets.Load()
	m := newMirror(t, o, true)
	cfg.Proxy = ProxyConfig{URL: m.srv.URL, Fallback: true, CheckInterval: time.Hour}
	b = newBackend(t, cfg)
	c = &collector{t: t}
	src, err = b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb))
	if err != nil || src != SourceProxy {
		t.Fatalf("proxy up: got %s, %v; want %s, nil", src, err, SourceProxy)
	}
	c.check(cb)
	if n := o.gets.Load() - before; n != 0 {
		t.Errorf("proxy up: the registry saw %d blob GETs, want 0", n)
	}
}

// A registry that fails transiently is retried with backoff and the whole
// run arrives once.
func TestReadChunksRetriesTransient(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(63, 4000, 4000, 4000)
	o.put(t, cb.data)
	o.setHook(func(n int64, w http.ResponseWriter, r *http.Request) bool {
		if n <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	clock := newStepClock()
	b := newBackend(t, o.config(), WithClock(clock))
	c := &collector{t: t}
	if _, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb)); err != nil {
		t.Fatal(err)
	}
	c.check(cb)
	if st := b.Stats().Registry; st.Requests != 3 || st.Errors != 2 || st.Retries != 2 {
		t.Errorf("stats: got %+v, want 3 requests, 2 failed", st)
	}
	if w := clock.waits(); len(w) != 2 {
		t.Errorf("waits: got %v, want 2 backoffs", w)
	}
}

// An error from deliver ends the read at once with that error: no retry,
// no further chunk.
func TestReadChunksDeliverError(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(64, 100, 200, 300)
	o.put(t, cb.data)
	b := newBackend(t, o.config(), WithClock(newStepClock()))
	stop := errors.New("reader gone")
	var calls int
	_, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, func(i int, _ rafs.Chunk, _ []byte) error {
		calls++
		if i == 1 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("got %v, want the deliver error", err)
	}
	if calls != 2 {
		t.Errorf("deliver called %d times, want 2", calls)
	}
	if st := b.Stats().Registry; st.Requests != 1 || st.Errors != 0 {
		t.Errorf("stats: got %+v, want one request, not counted as failed", st)
	}
}

func TestReadChunksBadRun(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(65, 100, 200, 300)
	o.put(t, cb.data)
	b := newBackend(t, o.config(), WithClock(newStepClock()))
	gap := append([]rafs.Chunk{}, cb.chunks[0], cb.chunks[2])
	other := append([]rafs.Chunk{}, cb.chunks...)
	other[1].Blob = 7
	past := append([]rafs.Chunk{}, cb.chunks...)
	past[2].CompressedSize += 10
	backwards := []rafs.Chunk{cb.chunks[1], cb.chunks[0]}
	huge := []rafs.Chunk{{CompressedOffset: 0, CompressedSize: 1 << 31, Size: 1}}
	hugeBlob := cb.blob
	hugeBlob.CompressedSize = 0 // size unknown: the run limit still holds
	tests := []struct {
		name   string
		blob   rafs.Blob
		chunks []rafs.Chunk
	}{
		{"gap", cb.blob, gap},
		{"other blob", cb.blob, other},
		{"past the end", cb.blob, past},
		{"backwards", cb.blob, backwards},
		{"too large", hugeBlob, huge},
	}
	for _, tt := range tests {
		_, err := b.ReadChunksFrom(t.Context(), tt.blob, tt.chunks, func(int, rafs.Chunk, []byte) error {
			t.Errorf("%s: delivered a chunk", tt.name)
			return nil
		})
		if !errors.Is(err, ErrRange) {
			t.Errorf("%s: got %v, want ErrRange", tt.name, err)
		}
	}
	if n := o.gets.Load(); n != 0 {
		t.Errorf("the registry saw %d blob GETs, want 0", n)
	}
}

func TestReadChunksNotFoundFailsFast(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(66, 100)
	clock := newStepClock()
	b := newBackend(t, o.config(), WithClock(clock))
	_, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, func(int, rafs.Chunk, []byte) error { return nil })
	var re *ReadError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &re) || re.Len != 100 {
		t.Fatalf("got %v, want a ReadError of 100 bytes wrapping ErrNotFound", err)
	}
	if w := clock.waits(); len(w) != 0 {
		t.Errorf("waited %v, want none", w)
	}
}

func TestReadChunksCancelled(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(67, 100)
	o.put(t, cb.data)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	o.setHook(func(_ int64, w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-block:
		case <-r.Context().Done():
		}
		return true
	})
	b := newBackend(t, o.config())
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		rafstest.Eventually(t, 10*time.Second, "the request", func() bool { return o.gets.Load() > 0 })
		cancel()
	}()
	_, err := b.ReadChunksFrom(ctx, cb.blob, cb.chunks, func(int, rafs.Chunk, []byte) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestReadChunksClosed(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(68, 100)
	b := newBackend(t, o.config())
	b.Close()
	if _, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

// testPeer is a ChunkSource for a real proxy.Server: it reads each chunk
// from the origin by range (through registry.Client), verifies it and
// delivers it. Faults are injected per blob ordinal: failAt answers that
// chunk with a ChunkError once (transient or not); corrupt delivers that
// chunk with a flipped byte, unverified; compress delivers chunks
// zstd-compressed (the other form than the blob's).
type testPeer struct {
	up       *registry.Client
	failAt   atomic.Int64 // ordinal+1; 0 for none
	failPerm bool
	corrupt  atomic.Int64 // ordinal+1; 0 for none
	compress bool
	requests atomic.Int64
	served   atomic.Int64 // chunks sent
	firsts   sync.Map     // ordinal of each request's first chunk -> true
}

func (p *testPeer) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	p.requests.Add(1)
	p.firsts.Store(chunks[0].Ordinal, true)
	for i, c := range chunks {
		if int64(c.Ordinal)+1 == p.failAt.Load() && p.failAt.CompareAndSwap(int64(c.Ordinal)+1, 0) {
			return &chunkapi.ChunkError{Index: i, Transient: !p.failPerm, Err: errors.New("injected failure")}
		}
		stored := make([]byte, c.CompressedSize)
		if err := p.up.ReadRange(ctx, up, blob, int64(c.CompressedOffset), stored); err != nil {
			return &chunkapi.ChunkError{Index: i, Transient: registry.IsTransient(err), Err: err}
		}
		if int64(c.Ordinal)+1 == p.corrupt.Load() {
			stored[len(stored)/2] ^= 0x55
		} else if err := rafs.DecodeChunk(c, stored, make([]byte, c.Size)); err != nil {
			return &chunkapi.ChunkError{Index: i, Err: err}
		}
		if p.compress && !c.Compressed() {
			enc, err := zstd.NewWriter(nil)
			if err != nil {
				return err
			}
			stored = enc.EncodeAll(stored, nil)
			enc.Close()
			c.Flags |= rafs.ChunkCompressed
			c.CompressedSize = uint32(len(stored))
		}
		p.served.Add(1) // before deliver: it returns after the client may have read it all
		if err := deliver(i, c, stored); err != nil {
			return err
		}
	}
	return nil
}

// startPeer serves peer's chunks on a real proxy.Server on 127.0.0.1,
// stopped at cleanup; it returns the server's base URL.
func startPeer(t *testing.T, o *origin, peer *testPeer) string {
	t.Helper()
	return startPeerSocket(t, o, peer, "")
}

// startPeerSocket is startPeer that also serves the unix socket sock
// (when not empty).
func startPeerSocket(t *testing.T, o *origin, peer *testPeer, sock string) string {
	t.Helper()
	rc := registry.Default()
	rc.DefaultRegistry = o.srv.URL
	up, err := registry.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	peer.up = up
	pc := peerproxy.Default()
	pc.Listen, pc.UnixSocket = "127.0.0.1:0", sock
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy serve: %v", err)
		}
		up.Close()
	})
	return srv.URL()
}

func TestReadChunksThroughPeer(t *testing.T) {
	t.Parallel()
	sizes := []int{3000, 50000, 1, 4096, 20000, 777}
	total := 0
	for _, n := range sizes {
		total += n
	}
	prefix := func(n int) uint64 {
		var s uint64
		for _, k := range sizes[:n] {
			s += uint64(k)
		}
		return s
	}
	tests := []struct {
		name     string
		fallback bool
		setup    func(*testPeer)
		// wantProxy is the stored bytes the proxy delivered; the rest
		// must come from the registry.
		wantProxy      uint64
		wantHealthy    bool
		wantFirsts     []uint32 // ordinals that started a peer request
		wantPeerServed int64
		servedAtLeast  bool // the peer may send more before it sees the client leave
	}{
		{name: "all from the peer", fallback: true, setup: func(*testPeer) {},
			wantProxy: uint64(total), wantHealthy: true, wantFirsts: []uint32{0}, wantPeerServed: 6},
		{name: "other form", fallback: true, setup: func(p *testPeer) { p.compress = true },
			wantProxy: 0 /* counted below */, wantHealthy: true, wantFirsts: []uint32{0}, wantPeerServed: 6},
		{name: "transient mid-batch, fallback", fallback: true, setup: func(p *testPeer) { p.failAt.Store(3) },
			wantProxy: prefix(2), wantHealthy: false, wantFirsts: []uint32{0}, wantPeerServed: 2},
		{name: "transient mid-batch, no fallback", fallback: false, setup: func(p *testPeer) { p.failAt.Store(3) },
			wantProxy: uint64(total), wantHealthy: false, wantFirsts: []uint32{0, 2}, wantPeerServed: 6},
		{name: "permanent mid-batch, fallback", fallback: true, setup: func(p *testPeer) { p.failAt.Store(5); p.failPerm = true },
			wantProxy: prefix(4), wantHealthy: true, wantFirsts: []uint32{0}, wantPeerServed: 4},
		// The peer sends chunk 1 corrupt; the client refuses it.
		{name: "corrupt chunk, fallback", fallback: true, setup: func(p *testPeer) { p.corrupt.Store(2) },
			wantProxy: prefix(1), wantHealthy: true, wantFirsts: []uint32{0}, wantPeerServed: 2, servedAtLeast: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t)
			cb := newChunkedBlob(70, sizes...)
			o.put(t, cb.data)
			peer := &testPeer{}
			tt.setup(peer)
			// The health probe runs once, at New; the read waits for
			// it so that its verdict cannot land after the read's own.
			var pings atomic.Int64
			ping := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { pings.Add(1) }))
			t.Cleanup(ping.Close)
			cfg := o.config()
			cfg.Proxy = ProxyConfig{URL: startPeer(t, o, peer), PingURL: ping.URL, Fallback: tt.fallback, CheckInterval: time.Hour}
			b := newBackend(t, cfg)
			rafstest.Eventually(t, 10*time.Second, "the first health probe", func() bool { return pings.Load() > 0 })
			c := &collector{t: t}
			if _, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb)); err != nil {
				t.Fatal(err)
			}
			c.check(cb)
			st := b.Stats()
			if tt.wantProxy > 0 && st.Proxy.Bytes != tt.wantProxy {
				t.Errorf("proxy bytes: got %d, want %d", st.Proxy.Bytes, tt.wantProxy)
			}
			if peer.compress && (st.Proxy.Bytes == 0 || st.Proxy.Bytes == uint64(total)) {
				t.Errorf("proxy bytes: got %d, want the compressed form's, not the raw %d", st.Proxy.Bytes, total)
			}
			if want := uint64(total) - tt.wantProxy; !peer.compress && st.Registry.Bytes != want {
				t.Errorf("registry bytes: got %d, want %d", st.Registry.Bytes, want)
			}
			if st.ProxyHealthy != tt.wantHealthy {
				t.Errorf("proxy healthy: got %v, want %v", st.ProxyHealthy, tt.wantHealthy)
			}
			for _, f := range tt.wantFirsts {
				if _, ok := peer.firsts.Load(f); !ok {
					t.Errorf("no peer request started at chunk %d", f)
				}
			}
			if got := peer.served.Load(); got != tt.wantPeerServed && !(tt.servedAtLeast && got > tt.wantPeerServed) {
				t.Errorf("peer served %d chunks, want %d", got, tt.wantPeerServed)
			}
		})
	}
}

// A proxy URL naming the peer's unix socket reads chunks and probes
// health over the socket.
func TestReadChunksThroughPeerSocket(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(72, 3000, 50000, 1, 4096)
	o.put(t, cb.data)
	peer := &testPeer{}
	sock := filepath.Join(t.TempDir(), "peer.sock")
	cfg := o.config()
	cfg.Proxy = ProxyConfig{URL: "unix://" + sock, Fallback: false, CheckInterval: 5 * time.Millisecond}
	cfg = cfg.resolve()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy.PingURL != "/healthz" {
		t.Errorf("default ping_url with a socket: got %q, want /healthz", cfg.Proxy.PingURL)
	}
	// Health probes go over the socket: unhealthy while nothing serves
	// it, healthy once the peer does.
	b := newBackend(t, cfg)
	rafstest.Eventually(t, 10*time.Second, "the proxy to be found down", func() bool { return !b.Stats().ProxyHealthy })
	startPeerSocket(t, o, peer, sock)
	rafstest.Eventually(t, 10*time.Second, "the proxy to be found up", func() bool { return b.Stats().ProxyHealthy })
	c := &collector{t: t}
	if _, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb)); err != nil {
		t.Fatal(err)
	}
	c.check(cb)
	st := b.Stats()
	if st.Registry.Requests != 0 || peer.served.Load() != int64(len(cb.chunks)) {
		t.Errorf("registry requests %d, peer served %d; want 0 and %d", st.Registry.Requests, peer.served.Load(), len(cb.chunks))
	}
}

// Without fallback, a chunk the peer sends corrupt fails the read: it
// never reaches deliver, and the registry is not asked.
func TestReadChunksCorruptNoFallback(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	cb := newChunkedBlob(71, 1000, 2000, 3000)
	o.put(t, cb.data)
	peer := &testPeer{}
	peer.corrupt.Store(2)
	cfg := o.config()
	cfg.Proxy = ProxyConfig{URL: startPeer(t, o, peer), Fallback: false, CheckInterval: time.Hour}
	b := newBackend(t, cfg)
	c := &collector{t: t}
	_, err := b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, c.deliver(cb))
	var ce *chunkapi.ChunkError
	if !errors.Is(err, rafs.ErrDigestMismatch) || !errors.As(err, &ce) {
		t.Fatalf("got %v, want a ChunkError wrapping a digest mismatch", err)
	}
	if c.got[1] != nil || c.got[2] != nil || c.got[0] == nil {
		t.Errorf("delivered chunks: got %v, want only chunk 0", c.next)
	}
	if st := b.Stats(); st.Registry.Requests != 0 {
		t.Errorf("registry requests: got %d, want 0", st.Registry.Requests)
	}
}

// ReadDecodedChunksFrom hands over the decoded bytes of chunks the peer's
// batch client verified, with the source of each chunk; chunks read by
// range from the registry after a failure part-way come without them.
func TestReadDecodedChunksFrom(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		failAt    int64 // ordinal+1 the peer fails transiently
		wantPlain int   // chunks delivered with plain, from the proxy
	}{
		{name: "all from the peer", wantPlain: 4},
		{name: "rest from the registry", failAt: 3, wantPlain: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t)
			cb := newChunkedBlob(72, 5000, 60000, 1, 4096)
			o.put(t, cb.data)
			peer := &testPeer{}
			peer.failAt.Store(tt.failAt)
			var pings atomic.Int64
			ping := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { pings.Add(1) }))
			t.Cleanup(ping.Close)
			cfg := o.config()
			cfg.Proxy = ProxyConfig{URL: startPeer(t, o, peer), PingURL: ping.URL, Fallback: true, CheckInterval: time.Hour}
			b := newBackend(t, cfg)
			rafstest.Eventually(t, 10*time.Second, "the first health probe", func() bool { return pings.Load() > 0 })
			next, plains := 0, 0
			src, err := b.ReadDecodedChunksFrom(t.Context(), cb.blob, cb.chunks, func(i int, c rafs.Chunk, stored, plain []byte, src Source) error {
				if i != next {
					t.Errorf("delivered chunk %d, want %d", i, next)
				}
				next++
				want := cb.data[c.CompressedOffset:][:c.CompressedSize]
				if !bytes.Equal(stored, want) {
					t.Errorf("chunk %d: wrong stored bytes", i)
				}
				switch {
				case plain != nil && src != SourceProxy:
					t.Errorf("chunk %d: decoded bytes from %s, want them only from the proxy", i, src)
				case plain != nil:
					plains++
					if !bytes.Equal(plain, want) {
						t.Errorf("chunk %d: wrong decoded bytes", i)
					}
				case src == SourceProxy:
					t.Errorf("chunk %d from the proxy without its decoded bytes", i)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if next != len(cb.chunks) || plains != tt.wantPlain {
				t.Errorf("delivered %d chunks, %d with decoded bytes; want %d, %d", next, plains, len(cb.chunks), tt.wantPlain)
			}
			want := SourceProxy
			if tt.failAt > 0 {
				want = SourceRegistry
			}
			if src != want {
				t.Errorf("last source %s, want %s", src, want)
			}
		})
	}
}

// From an OCI layout, chunks come unverified, without decoded bytes.
func TestReadDecodedChunksOCI(t *testing.T) {
	t.Parallel()
	cb := newChunkedBlob(73, 100, 200, 300)
	dir, blobs := writeLayout(t, cb.data)
	b := newBackend(t, OCI(dir))
	n := 0
	_, err := b.ReadDecodedChunksFrom(t.Context(), blobs[0], cb.chunks, func(i int, c rafs.Chunk, stored, plain []byte, src Source) error {
		n++
		if plain != nil || src != SourceOCI {
			t.Errorf("chunk %d: decoded bytes %v, source %s; want none, %s", i, plain != nil, src, SourceOCI)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("got %v after %d chunks, want 3 chunks", err, n)
	}
}
