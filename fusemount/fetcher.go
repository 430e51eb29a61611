package fusemount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"damselfly/fusemount/backend"
	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/cache"
	"damselfly/rafs/flight"
	"damselfly/rafs/runs"
)

// Backend reads stored blob bytes from wherever the image lives and says
// which source served them ("proxy", "registry", "oci").
type Backend interface {
	// ReadBlobFrom fills p with exactly bytes [off, off+len(p)) of blob,
	// retrying transient failures up to its deadline. Safe for
	// concurrent use.
	ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error)
}

// ChunkBackend is a Backend that also reads runs of chunks by their
// descriptions, which lets the node's peer verify each chunk before it
// caches or serves it. The Fetcher uses it, found by type assertion, in
// place of ReadBlobFrom.
type ChunkBackend interface {
	// ReadChunksFrom reads chunks, a contiguous run of blob in offset
	// order, calling deliver for each chunk in order, one call at a
	// time: dc is the chunk as delivered (its Flags and
	// CompressedSize describe stored, possibly the other form than the
	// bootstrap's); stored is valid only during the call. The bytes may
	// be unverified: deliver checks them. An error from deliver stops the
	// read and is returned wrapped. It retries transient failures up to
	// its deadline, going on with the chunks not yet delivered, and says
	// which source delivered the last chunk (or, on error, was tried
	// last). Safe for concurrent use.
	ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
		deliver func(i int, dc rafs.Chunk, stored []byte) error) (string, error)
}

// DecodedChunkBackend is a Backend that reads runs of chunks as
// ChunkBackend does, and also says which of its sources delivered each
// chunk and hands over the decoded bytes of chunks it verified itself on
// their way into this process (the local peer's batch client does), so
// that they are not decoded and hashed twice. The Fetcher prefers it,
// found by type assertion, to ChunkBackend.
type DecodedChunkBackend interface {
	// ReadDecodedChunksFrom is ReadChunksFrom whose deliver also gets
	// plain and src: src is the source that delivered chunk i; plain,
	// when not nil, is its decoded content (dc.Size bytes) already
	// checked against dc.Digest, made for this chunk alone: deliver may
	// keep it, and nobody else writes it. Chunks delivered with plain nil
	// are unverified: deliver checks them.
	ReadDecodedChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
		deliver func(i int, dc rafs.Chunk, stored, plain []byte, src string) error) (string, error)
}

// SourceBackend labels chunks from a ChunkBackend that does not say
// which of its sources delivered each one.
const SourceBackend = "backend"

// runsOf returns how the Fetcher reads chunk runs from be, nil if only
// by byte range. The daemon's own adapter is recognised here, rather
// than given the method, so that a wrapper embedding it and overriding
// ReadChunksFrom still sees every run; its backend chain passes the
// decoded bytes of chunks the local peer's client verified on.
func runsOf(be Backend) DecodedChunkBackend {
	switch be := be.(type) {
	case DecodedChunkBackend:
		return be
	case *backendAdapter:
		if be.local == nil {
			return remoteRuns{be.remote}
		}
		return sourceRuns{be, SourceLocal}
	case ChunkBackend:
		return sourceRuns{be, SourceBackend}
	}
	return nil
}

// remoteRuns reads runs from the configured backend chain.
type remoteRuns struct{ b *backend.Backend }

func (r remoteRuns) ReadDecodedChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored, plain []byte, src string) error) (string, error) {
	src, err := r.b.ReadDecodedChunksFrom(ctx, blob, chunks, func(i int, c rafs.Chunk, stored, plain []byte, src backend.Source) error {
		return deliver(i, c, stored, plain, string(src))
	})
	return string(src), err
}

// sourceRuns reads runs from a ChunkBackend, whose chunks come
// unverified, labelling them src.
type sourceRuns struct {
	cb  ChunkBackend
	src string
}

func (s sourceRuns) ReadDecodedChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored, plain []byte, src string) error) (string, error) {
	return s.cb.ReadChunksFrom(ctx, blob, chunks, func(i int, dc rafs.Chunk, stored []byte) error {
		return deliver(i, dc, stored, nil, s.src)
	})
}

// FetcherConfig tunes the read path.
type FetcherConfig struct {
	// AmplifyIO is the most bytes one backend request fetches: a miss
	// pulls in the following chunks of the same blob that are missing,
	// up to this size (Nydus' amplify_io).
	AmplifyIO int
	// MemoryBytes bounds the decoded chunks kept in memory, which serve
	// the kernel's reads (128 KiB to 1 MiB each) of one chunk without
	// decoding it again.
	MemoryBytes int64
	// ReadaheadChunks is how many chunks past a sequential read are
	// fetched in the background.
	ReadaheadChunks int
	// VerifyRetries is how often a chunk that fails verification is
	// fetched again before the read fails.
	VerifyRetries int
}

// Fetcher is the mount's read path: memory, then the node cache, then the
// backend, with every chunk verified before it is returned or cached.
// Concurrent misses on one chunk cause one fetch; adjacent misses in a
// blob are merged into one request, whose chunks are served as they
// arrive. Safe for concurrent use.
type Fetcher struct {
	b       *rafs.Bootstrap
	cache   *cache.Cache // nil: memory only
	backend Backend
	runs    DecodedChunkBackend // nil: the backend reads byte ranges only
	cfg     FetcherConfig
	log     *slog.Logger
	mem     *memory
	flights flight.Group[uint32, fetched] // flight.go
	m       *Metrics

	demand    atomic.Int64 // on-demand backend fetches in flight; prefetch yields to them
	raFlying  atomic.Int64 // readahead fetches in flight, at most raLimit
	raLimit   int64
	bg        sync.WaitGroup
	bgCtx     context.Context
	bgStop    context.CancelFunc
	noSpaceAt atomic.Int64  // last time a full cache was logged (unix seconds)
	slowRead  time.Duration // a backend request this long is logged (slowRead; tests lower it)

	mu     sync.Mutex
	closed bool // no goroutine starts after Close
}

var (
	_ ChunkReader = (*Fetcher)(nil)
	_ ChunkViewer = (*Fetcher)(nil)
)

// NewFetcher builds the read path over b. c may be nil.
func NewFetcher(b *rafs.Bootstrap, c *cache.Cache, be Backend, cfg FetcherConfig, m *Metrics, log *slog.Logger) (*Fetcher, error) {
	if cfg.AmplifyIO <= 0 {
		cfg.AmplifyIO = 1 << 20
	}
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = 32 << 20
	}
	if cfg.VerifyRetries <= 0 {
		cfg.VerifyRetries = 3
	}
	mem := newMemory(cfg.MemoryBytes)
	if m == nil {
		m = NewMetrics()
	}
	ctx, stop := context.WithCancel(context.Background())
	f := &Fetcher{b: b, cache: c, backend: be, runs: runsOf(be), cfg: cfg, log: log, mem: mem, m: m,
		raLimit: int64(max(8, 4*cfg.ReadaheadChunks)), bgCtx: ctx, bgStop: stop, slowRead: slowRead}
	f.flights.SetRelease(fetched.release)
	return f, nil
}

// Close stops background work (readahead, the tails of runs) and waits
// for it. Reads after Close fail.
func (f *Fetcher) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.bgStop()
	f.bg.Wait()
}

// ReadChunk implements ChunkReader and rafs.ChunkSource.
func (f *Fetcher) ReadChunk(ctx context.Context, c rafs.Chunk, dst []byte) error {
	return f.ReadChunkAt(ctx, c, 0, dst)
}

// ReadChunkAt implements ChunkReader.
func (f *Fetcher) ReadChunkAt(ctx context.Context, c rafs.Chunk, off int, p []byte) error {
	if off < 0 || off+len(p) > int(c.Size) {
		return fmt.Errorf("chunk %s: range %d+%d outside %d bytes", c.Digest, off, len(p), c.Size)
	}
	start := time.Now()
	d, src, err := f.chunk(ctx, c, modeDemand)
	if err != nil {
		f.m.errors.Inc()
		return err
	}
	copy(p, d.b[off:])
	d.drop()
	f.m.observeRead(src, len(p), time.Since(start))
	return nil
}

// ViewChunk implements ChunkViewer: the decoded chunk is never written
// again, and its buffer goes back to the pool only after done (and every
// other holder) let go of it, so a reply may be written from it while it
// leaves memory.
func (f *Fetcher) ViewChunk(ctx context.Context, c rafs.Chunk) ([]byte, func(), error) {
	start := time.Now()
	d, src, err := f.chunk(ctx, c, modeDemand)
	if err != nil {
		f.m.errors.Inc()
		return nil, nil, err
	}
	if len(d.b) != int(c.Size) {
		d.drop()
		f.m.errors.Inc()
		return nil, nil, fmt.Errorf("chunk %s: %d decoded bytes, want %d", c.Digest, len(d.b), c.Size)
	}
	f.m.observeRead(src, len(d.b), time.Since(start))
	return d.b, d.drop, nil
}

// fetchMode says who wants a chunk: a reader waiting now, readahead for
// a reader, or prefetch (which must not evict readers' chunks from memory).
type fetchMode int

const (
	modeDemand fetchMode = iota
	modeReadahead
	modePrefetch
)

// chunk returns the decoded bytes of c, with a reference the caller
// drops, and where they came from. A miss joins the chunk's flight, or
// starts a run with c at its head and waits only for c.
func (f *Fetcher) chunk(ctx context.Context, c rafs.Chunk, mode fetchMode) (*decoded, string, error) {
	if data, ok := f.mem.Get(c.Index); ok {
		return data, SourceMemory, nil
	}
	fs, run, rctx, _ := f.flights.Join(context.WithoutCancel(ctx), c.Index)
	fl, leader := fs[0], run != nil
	if leader {
		cacheChecked := false
		if mode == modeDemand && f.cache != nil {
			// A warm read: the leader reads the node cache in its own
			// goroutine, with no handoff; readers of the same chunk
			// meanwhile (the kernel sends several reads of one chunk at
			// once) join its flight rather than decode it again.
			if data, src, ok := f.warm(c); ok {
				run.Cancel()
				f.arrived(fl, true, data.hold(), src)
				f.flights.Leave(fl)
				return data, src, nil
			}
			cacheChecked = true
		}
		if !f.launch(func() { f.fetchRun(rctx, fl, c, mode, cacheChecked) }) {
			run.Cancel()
			f.failed(fl, errFetcherClosed)
		}
	}
	got, err := f.await(ctx, fl)
	if !leader {
		// Joined a fetch another caller started: a miss for them, a
		// shared fetch for us.
		got.src = SourceShared
	}
	return got.data, got.src, err
}

// warm serves c from memory (a flight that ended just before this one
// began may have left it there) or the node cache, for a demand read,
// with a reference the caller drops.
func (f *Fetcher) warm(c rafs.Chunk) (*decoded, string, bool) {
	if data, ok := f.mem.Get(c.Index); ok {
		return data, SourceMemory, true
	}
	if data, ok := f.fromCache(c, true); ok {
		return data, SourceCache, true
	}
	return nil, "", false
}

// errFetcherClosed fails reads that start after Close.
var errFetcherClosed = errors.New("fusemount: read path closed")

// launch runs fn on a goroutine that Close waits for; false after Close.
func (f *Fetcher) launch(fn func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		fn()
	}()
	return true
}

// fromCache reads c from the node cache, verified, keeping it in memory
// when keep is set; a miss is counted, and logged when it is not a plain
// absence. The chunk comes with a reference the caller drops.
func (f *Fetcher) fromCache(c rafs.Chunk, keep bool) (*decoded, bool) {
	buf := bufpool.Get(int(c.Size))
	err := f.cache.ReadChunk(c, buf)
	if err == nil {
		d := newDecoded(buf)
		if keep {
			f.mem.Add(c.Index, d.hold())
		}
		f.m.cacheHits.Inc()
		return d, true
	}
	bufpool.Put(buf)
	if !errors.Is(err, cache.ErrNotFound) {
		f.log.Warn("node cache read failed; fetching instead", "chunk", c.Digest.String(), "err", err)
	}
	f.m.cacheMisses.Inc()
	return nil, false
}

// fetchRun is the goroutine of the run headed by c: memory and the node
// cache again (unless the caller has just missed there), else a backend
// request for c and the missing chunks after it. It completes every
// flight of the run. Close cancels it.
func (f *Fetcher) fetchRun(ctx context.Context, head *chunkFlight, c rafs.Chunk, mode fetchMode, cacheChecked bool) {
	run := head.Batch()
	stop := context.AfterFunc(f.bgCtx, run.Cancel)
	defer stop()
	defer run.Cancel()
	if data, ok := f.mem.Get(c.Index); ok {
		f.arrived(head, true, data, SourceMemory)
		return
	}
	if f.cache != nil && !cacheChecked {
		if data, ok := f.fromCache(c, mode != modePrefetch); ok {
			f.arrived(head, true, data, SourceCache)
			return
		}
	}
	headDone := func() {}
	if mode == modeDemand {
		// Prefetch yields while a reader waits; the run's tail is
		// background work.
		f.demand.Add(1)
		var once sync.Once
		headDone = func() { once.Do(func() { f.demand.Add(-1) }) }
		defer headDone()
	}
	blob, err := f.b.Blob(c.Blob)
	if err != nil {
		f.failed(head, err)
		return
	}
	chunks := f.plan(c)
	keys := make([]uint32, 0, len(chunks)-1)
	for _, k := range chunks[1:] {
		keys = append(keys, k.Index)
	}
	fls := f.flights.Extend(run, keys...)
	f.fetch(ctx, blob, chunks[:len(fls)], fls, mode != modePrefetch, headDone)
}

// fetch reads chunks, a run whose first chunk a reader wants, in one
// backend request, and verifies, stores and completes the flight of each
// chunk as it is delivered (headDone is called when the first one is).
// A chunk that fails verification is fetched again on its own, up to
// VerifyRetries times in all, the head first. Chunks the backend could
// not deliver get its error; the chunks delivered before it are served.
func (f *Fetcher) fetch(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk, fls []*chunkFlight, keep bool, headDone func()) {
	n := len(chunks)
	done := make([]bool, n)
	verifyErr := make([]error, n)
	// deliver takes the chunks of a request for chunks[base:base+count].
	deliver := func(base, count int) func(i int, dc rafs.Chunk, stored, plain []byte, src string) error {
		return func(i int, dc rafs.Chunk, stored, plain []byte, src string) error {
			if i < 0 || i >= count {
				return fmt.Errorf("backend delivered chunk %d of a run of %d", i, count)
			}
			j := base + i
			k := chunks[j]
			if done[j] {
				return fmt.Errorf("backend delivered chunk %d (%s) twice", i, k.Digest)
			}
			if dc.Digest != k.Digest || dc.Size != k.Size {
				return fmt.Errorf("backend delivered chunk %s (%d bytes) for %s (%d bytes)", dc.Digest, dc.Size, k.Digest, k.Size)
			}
			f.m.backendBytes.WithLabelValues(src).Add(float64(len(stored)))
			// The bootstrap says what the chunk is; the backend only in
			// which form (compressed or raw) it delivered it.
			as := k
			as.Flags = k.Flags&^rafs.ChunkCompressed | dc.Flags&rafs.ChunkCompressed
			as.CompressedSize = dc.CompressedSize
			dec, err := f.accept(blob, k, as, stored, plain, src, keep) // ours: arrived takes it
			if err != nil {
				verifyErr[j] = err
				return nil
			}
			verifyErr[j] = nil
			done[j] = true
			f.arrived(fls[j], j == 0, dec, src)
			if j == 0 {
				headDone()
			}
			return nil
		}
	}
	began := time.Now()
	src, runErr := f.read(ctx, blob, chunks, deliver(0, n))
	delivered := 0
	for _, d := range done {
		if d {
			delivered++
		}
	}
	if took := time.Since(began); took >= f.slowRead {
		// Readers waited this long: say for what (the node's peer logs
		// its own side of a slow fetch).
		args := []any{"blob", blob.Digest.String(), "first_chunk", chunks[0].Index, "chunks", n, "delivered", delivered,
			"source", src, "took", took.Round(time.Millisecond)}
		if runErr != nil {
			args = append(args, "err", runErr)
		}
		f.log.Warn("slow chunk read", args...)
	}
	run := runs.Of(chunks)
	fail := func(j int, err error) {
		f.failed(fls[j], fmt.Errorf("fetch chunk %s (blob %s, run of chunks %d-%d, bytes %d+%d, %d delivered): %w",
			chunks[j].Digest, blob.Digest, chunks[0].Index, chunks[n-1].Index, run.Off, run.Len(), delivered, err))
	}
	// Chunks never delivered share the run's fate; then those delivered
	// bad are fetched again.
	for j := range chunks {
		if !done[j] && verifyErr[j] == nil {
			err := runErr
			if err == nil {
				err = errors.New("the backend ended the read without delivering it")
			}
			fail(j, err)
		}
	}
	for j := range chunks {
		if verifyErr[j] == nil {
			continue
		}
		var readErr error
		for attempt := 1; attempt < f.cfg.VerifyRetries && !done[j] && readErr == nil; attempt++ {
			if _, err := f.read(ctx, blob, chunks[j:j+1], deliver(j, 1)); err != nil && !done[j] {
				readErr = err
			}
		}
		switch {
		case done[j]:
		case readErr != nil:
			fail(j, readErr)
		default:
			f.failed(fls[j], fmt.Errorf("chunk %s of blob %s failed verification %d times: %w",
				chunks[j].Digest, blob.Digest, f.cfg.VerifyRetries, verifyErr[j]))
		}
	}
	if runErr != nil && done[0] {
		f.log.Debug("chunk run ended early; the wanted chunk arrived", "blob", blob.Digest.String(), "delivered", delivered, "of", n, "err", runErr)
	}
}

// slowRead is how long a backend request for a run may take before it is
// logged: a reader waits on it, and a healthy node serves one in well
// under a second.
const slowRead = 5 * time.Second

// read asks the backend for chunks, a contiguous run of blob, and calls
// deliver for each as it arrives: as a run (with the decoded bytes of
// chunks the backend verified) when the backend reads runs, else as
// slices of the run's byte range once it has arrived whole.
func (f *Fetcher) read(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored, plain []byte, src string) error) (string, error) {
	f.m.inflight.Inc()
	defer f.m.inflight.Dec()
	if f.runs != nil {
		return f.runs.ReadDecodedChunksFrom(ctx, blob, chunks, deliver)
	}
	run := runs.Of(chunks)
	stored := make([]byte, run.Len())
	src, err := f.backend.ReadBlobFrom(ctx, blob, int64(run.Off), stored)
	if err != nil {
		return src, err
	}
	for i, k := range chunks {
		if err := deliver(i, k, run.Stored(stored, k), nil, src); err != nil {
			return src, err
		}
	}
	return src, nil
}

// accept checks the bytes of chunk k delivered in the form as describes,
// and stores the chunk. plain, when not nil, is its decoded content,
// which the backend has verified in this process and hands over (the
// DecodedChunkBackend contract): it is kept, not decoded and hashed
// again, nor copied. It returns the decoded bytes, with a reference the
// caller drops.
func (f *Fetcher) accept(blob rafs.Blob, k, as rafs.Chunk, stored, plain []byte, src string, keep bool) (*decoded, error) {
	dec := plain
	var err error
	switch {
	case plain == nil:
		dec = bufpool.Get(int(k.Size))
		if err = rafs.DecodeChunkSpare(as, stored, dec); err != nil {
			bufpool.Put(dec)
		}
	case len(plain) != int(k.Size):
		err = fmt.Errorf("backend decoded chunk %s to %d bytes, want %d", k.Digest, len(plain), k.Size)
	}
	if err != nil {
		f.m.verifyFailures.Inc()
		f.log.Warn("chunk failed verification", "chunk", k.Digest.String(), "blob", blob.Digest.String(), "source", src, "err", err)
		return nil, err
	}
	// A chunk decoded on its way from the node's peer came through its
	// batch endpoint, and the peer puts every chunk it serves there in the
	// node cache itself (perhaps still doing so): writing it here too
	// would write it twice.
	d := newDecoded(dec)
	f.store(as, stored, d, keep, !(plain != nil && src == SourceProxy))
	return d, nil
}

// plan returns c and the chunks stored right after it in the same blob
// that are neither cached nor being fetched, up to AmplifyIO bytes
// (runs.Extend over the bootstrap's chunk table, which lists each blob's
// chunks in offset order; a chunk it cannot read ends the run).
func (f *Fetcher) plan(c rafs.Chunk) []rafs.Chunk {
	following := func(yield func(rafs.Chunk) bool) {
		for i := c.Index + 1; i < f.b.ChunkCount(); i++ {
			n, err := f.b.Chunk(i)
			if err != nil || !yield(n) {
				return
			}
		}
	}
	atHand := func(n rafs.Chunk) bool {
		return f.mem.Contains(n.Index) || f.flights.Busy(n.Index) || (f.cache != nil && f.cache.Has(cache.KeyOf(n)))
	}
	return runs.Extend(c, following, uint64(f.cfg.AmplifyIO), atHand).Chunks
}

// store keeps a verified chunk: in the node cache (stored form, shared with
// the node's peer) unless toCache is false (the peer caches it), and then
// in memory (decoded, with a reference of its own), so that a chunk seen
// in memory is in the cache too. A full disk only loses the cache copy;
// the read is served from memory.
func (f *Fetcher) store(k rafs.Chunk, stored []byte, dec *decoded, keep, toCache bool) {
	if f.cache != nil && toCache {
		f.putCache(k, stored)
	}
	if keep || f.cache == nil {
		f.mem.Add(k.Index, dec.hold())
	}
}

func (f *Fetcher) putCache(k rafs.Chunk, stored []byte) {
	if err := f.cache.PutChunk(k, stored); err != nil {
		if errors.Is(err, cache.ErrReadOnly) {
			return // a reader in the cache's group: the peer daemon stores chunks
		}
		f.m.cacheErrors.Inc()
		now := time.Now().Unix()
		if errors.Is(err, cache.ErrNoSpace) {
			if last := f.noSpaceAt.Load(); now-last >= 60 && f.noSpaceAt.CompareAndSwap(last, now) {
				f.log.Warn("node cache disk full; serving reads from memory", "err", err)
			}
			return
		}
		f.log.Warn("node cache write failed", "chunk", k.Digest.String(), "err", err)
	}
}

// Readahead fetches, in the background, the chunks of file in after
// chunk idx, when they are not already at hand. It never blocks.
func (f *Fetcher) Readahead(in rafs.Inode, idx uint32) {
	if f.cfg.ReadaheadChunks <= 0 || idx+1 >= in.DataCount {
		return
	}
	// Every chunk of the window not at hand gets its fetch now, before
	// the reader's own read goes on, so that the reader's next reads
	// join these flights (a run merges chunks adjacent in the blob, as
	// for a reader). Readahead fetches in flight are bounded over all
	// readers (raLimit); past the bound a window is cut short, and the
	// reader's own reads fetch the rest.
	var heads []*chunkFlight
	for i := idx + 1; i < in.DataCount && i <= idx+uint32(f.cfg.ReadaheadChunks); i++ {
		if f.raFlying.Load() >= f.raLimit {
			break
		}
		c, err := f.b.FileChunk(in, i)
		if err != nil {
			break
		}
		if f.mem.Contains(c.Index) || f.flights.Busy(c.Index) {
			continue
		}
		fs, run, rctx, _ := f.flights.Join(f.bgCtx, c.Index)
		if run == nil {
			f.flights.Leave(fs...) // a reader's fetch got there first
			continue
		}
		fl := fs[0]
		if !f.launch(func() { f.fetchRun(rctx, fl, c, modeReadahead, false) }) {
			run.Cancel()
			f.failed(fl, errFetcherClosed)
			f.flights.Leave(fl)
			break
		}
		f.raFlying.Add(1)
		f.m.readahead.Inc()
		heads = append(heads, fl)
	}
	if len(heads) == 0 {
		return
	}
	// One goroutine waits for the window, so that its flights have a
	// waiter (nobody else may) and the bound counts them until done.
	if !f.launch(func() {
		for _, fl := range heads {
			got, err := f.await(f.bgCtx, fl)
			if err != nil && f.bgCtx.Err() == nil {
				f.log.Debug("readahead fetch failed", "err", err)
			}
			got.release()
			f.raFlying.Add(-1)
		}
	}) {
		f.raFlying.Add(-int64(len(heads)))
		f.flights.Leave(heads...)
	}
}

// Prefetch fetches c into the node cache (not into memory, so prefetch
// does not push out what readers use) unless it is there already. It
// waits while on-demand fetches are in flight.
func (f *Fetcher) Prefetch(ctx context.Context, c rafs.Chunk) (fetched bool, err error) {
	for f.demand.Load() > 0 {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	if f.mem.Contains(c.Index) || (f.cache != nil && f.cache.Has(cache.KeyOf(c))) {
		return false, nil
	}
	d, _, err := f.chunk(ctx, c, modePrefetch)
	if err != nil {
		return false, err
	}
	d.drop()
	return true, nil
}

// HasLocal implements localChunks.
func (f *Fetcher) HasLocal(c rafs.Chunk) bool {
	return f.mem.Contains(c.Index) || (f.cache != nil && f.cache.Has(cache.KeyOf(c)))
}

// LocalChunk implements localChunks: memory, else the node cache (which
// checks the chunk's digest as it decodes it), without keeping what it
// reads in memory or counting it as a reader's read.
func (f *Fetcher) LocalChunk(c rafs.Chunk) (*decoded, bool) {
	if data, ok := f.mem.Get(c.Index); ok {
		return data, true
	}
	if f.cache == nil {
		return nil, false
	}
	buf := bufpool.Get(int(c.Size))
	if err := f.cache.ReadChunk(c, buf); err != nil {
		bufpool.Put(buf)
		if !errors.Is(err, cache.ErrNotFound) {
			f.log.Warn("node cache read failed", "chunk", c.Digest.String(), "err", err)
		}
		return nil, false
	}
	return newDecoded(buf), true
}
