package fusemount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"damselfly/peer/cache"
	"damselfly/rafs"
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
// blob are merged into one request. Safe for concurrent use.
type Fetcher struct {
	b       *rafs.Bootstrap
	cache   *cache.Cache // nil: memory only
	backend Backend
	cfg     FetcherConfig
	log     *slog.Logger
	mem     *lru.Cache[uint32, []byte]
	flights flightGroup
	m       *Metrics

	demand    atomic.Int64 // on-demand backend fetches in flight; prefetch yields to them
	raSem     chan struct{}
	bg        sync.WaitGroup
	bgCtx     context.Context
	bgStop    context.CancelFunc
	noSpaceAt atomic.Int64 // last time a full cache was logged (unix seconds)
}

var _ ChunkReader = (*Fetcher)(nil)

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
	n := max(4, int(cfg.MemoryBytes/int64(b.ChunkSize())))
	mem, err := lru.New[uint32, []byte](n)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = NewMetrics()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Fetcher{b: b, cache: c, backend: be, cfg: cfg, log: log, mem: mem, m: m,
		raSem: make(chan struct{}, 2), bgCtx: ctx, bgStop: stop}, nil
}

// Close stops background readahead and waits for it.
func (f *Fetcher) Close() {
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
	data, src, err := f.chunk(ctx, c, modeDemand)
	if err != nil {
		f.m.errors.Inc()
		return err
	}
	copy(p, data[off:])
	f.m.observeRead(src, len(p), time.Since(start))
	return nil
}

// fetchMode says who wants a chunk: a reader waiting now, readahead for
// a reader, or prefetch (which must not evict readers' chunks from memory).
type fetchMode int

const (
	modeDemand fetchMode = iota
	modeReadahead
	modePrefetch
)

// chunk returns the decoded bytes of c and where they came from.
func (f *Fetcher) chunk(ctx context.Context, c rafs.Chunk, mode fetchMode) ([]byte, string, error) {
	if data, ok := f.mem.Get(c.Index); ok {
		return data, SourceMemory, nil
	}
	var src string
	data, err := f.flights.do(ctx, c.Index, func(ctx context.Context) ([]byte, error) {
		if data, ok := f.mem.Get(c.Index); ok {
			src = SourceMemory
			return data, nil
		}
		if f.cache != nil {
			buf := make([]byte, c.Size)
			err := f.cache.ReadChunk(c, buf)
			if err == nil {
				if mode != modePrefetch {
					f.mem.Add(c.Index, buf)
				}
				src = SourceCache
				f.m.cacheHits.Inc()
				return buf, nil
			}
			if !errors.Is(err, cache.ErrNotFound) {
				f.log.Warn("node cache read failed; fetching instead", "chunk", c.Digest.String(), "err", err)
			}
			f.m.cacheMisses.Inc()
		}
		if mode == modeDemand {
			f.demand.Add(1)
			defer f.demand.Add(-1)
		}
		data, s, err := f.fetch(ctx, c, mode != modePrefetch)
		src = s
		return data, err
	})
	if src == "" {
		// Joined another caller's flight: it was a miss for them, a
		// shared fetch for us.
		src = SourceShared
	}
	return data, src, err
}

// fetch reads c, and the missing chunks that follow it in its blob up to
// AmplifyIO bytes, in one backend request; verifies each; caches them. A
// backend that reads chunk runs (ChunkBackend) is asked for the chunks;
// any other for their byte range.
func (f *Fetcher) fetch(ctx context.Context, c rafs.Chunk, keep bool) ([]byte, string, error) {
	blob, err := f.b.Blob(c.Blob)
	if err != nil {
		return nil, "", err
	}
	cb, batch := f.backend.(ChunkBackend)
	run := f.plan(c)
	var lastErr error
	for attempt := 0; attempt < f.cfg.VerifyRetries; attempt++ {
		if attempt > 0 {
			run = run[:1] // retry only what the reader needs
		}
		var (
			want []byte
			src  string
			err  error
		)
		if batch {
			want, src, err = f.fetchChunks(ctx, cb, blob, run, keep, &lastErr)
		} else {
			want, src, err = f.fetchRange(ctx, blob, run, keep, &lastErr)
		}
		if want != nil {
			return want, src, nil
		}
		if err != nil {
			return nil, src, err
		}
	}
	return nil, "", fmt.Errorf("chunk %s of blob %s failed verification %d times: %w", c.Digest, blob.Digest, f.cfg.VerifyRetries, lastErr)
}

// fetchRange reads the byte range of run, whose first chunk the reader
// wants, then verifies and stores each chunk. It returns the wanted
// chunk's bytes, nil (with *verifyErr set) if they failed verification.
func (f *Fetcher) fetchRange(ctx context.Context, blob rafs.Blob, run []rafs.Chunk, keep bool, verifyErr *error) ([]byte, string, error) {
	first, last := run[0], run[len(run)-1]
	end := last.CompressedOffset + uint64(last.CompressedSize)
	stored := make([]byte, end-first.CompressedOffset)
	f.m.inflight.Inc()
	src, err := f.backend.ReadBlobFrom(ctx, blob, int64(first.CompressedOffset), stored)
	f.m.inflight.Dec()
	if err != nil {
		return nil, src, fmt.Errorf("fetch chunk %s (blob %s, bytes %d+%d): %w", first.Digest, blob.Digest, first.CompressedOffset, len(stored), err)
	}
	f.m.backendBytes.WithLabelValues(src).Add(float64(len(stored)))
	var want []byte
	for i, k := range run {
		s := stored[k.CompressedOffset-first.CompressedOffset:][:k.CompressedSize]
		if dec := f.accept(blob, k, k, s, src, keep, verifyErr, i == 0); i == 0 {
			want = dec
		}
	}
	return want, src, nil
}

// fetchChunks asks cb for run, whose first chunk the reader wants, and
// verifies and stores each chunk as it is delivered. When the read fails
// after delivering the wanted chunk, the reader still gets it. It returns
// the wanted chunk's bytes, nil (with *verifyErr set) if they failed
// verification.
func (f *Fetcher) fetchChunks(ctx context.Context, cb ChunkBackend, blob rafs.Blob, run []rafs.Chunk, keep bool, verifyErr *error) ([]byte, string, error) {
	var (
		want      []byte
		delivered int
		received  int
	)
	f.m.inflight.Inc()
	src, err := cb.ReadChunksFrom(ctx, blob, run, func(i int, dc rafs.Chunk, stored []byte) error {
		if i < 0 || i >= len(run) {
			return fmt.Errorf("backend delivered chunk %d of a run of %d", i, len(run))
		}
		k := run[i]
		if dc.Digest != k.Digest || dc.Size != k.Size {
			return fmt.Errorf("backend delivered chunk %s (%d bytes) for %s (%d bytes)", dc.Digest, dc.Size, k.Digest, k.Size)
		}
		// The bootstrap says what the chunk is; the backend only in which
		// form (compressed or raw) it delivered it.
		as := k
		as.Flags = k.Flags&^rafs.ChunkCompressed | dc.Flags&rafs.ChunkCompressed
		as.CompressedSize = dc.CompressedSize
		received += len(stored)
		delivered++
		if dec := f.accept(blob, k, as, stored, "backend", keep, verifyErr, i == 0); i == 0 {
			want = dec
		}
		return nil
	})
	f.m.inflight.Dec()
	if received > 0 {
		f.m.backendBytes.WithLabelValues(src).Add(float64(received))
	}
	if err != nil && want == nil {
		first, last := run[0], run[len(run)-1]
		end := last.CompressedOffset + uint64(last.CompressedSize)
		return nil, src, fmt.Errorf("fetch chunk %s (blob %s, chunks %d-%d, bytes %d+%d, %d delivered): %w",
			first.Digest, blob.Digest, first.Index, last.Index, first.CompressedOffset, end-first.CompressedOffset, delivered, err)
	}
	if err != nil {
		f.log.Debug("chunk run ended early; the wanted chunk arrived", "blob", blob.Digest.String(), "delivered", delivered, "of", len(run), "err", err)
	}
	return want, src, nil
}

// accept verifies stored, the bytes of chunk k in the form as describes,
// and stores the chunk. It returns the decoded bytes, or nil if they
// failed verification; for the wanted chunk it records the failure in
// *verifyErr.
func (f *Fetcher) accept(blob rafs.Blob, k, as rafs.Chunk, stored []byte, src string, keep bool, verifyErr *error, wanted bool) []byte {
	dec := make([]byte, k.Size)
	if err := rafs.DecodeChunk(as, stored, dec); err != nil {
		f.m.verifyFailures.Inc()
		f.log.Warn("chunk failed verification", "chunk", k.Digest.String(), "blob", blob.Digest.String(), "source", src, "err", err)
		if wanted {
			*verifyErr = err
		}
		return nil
	}
	f.store(as, stored, dec, keep)
	return dec
}

// plan returns c and the chunks stored right after it in the same blob
// that are neither cached nor being fetched, up to AmplifyIO bytes.
func (f *Fetcher) plan(c rafs.Chunk) []rafs.Chunk {
	run := []rafs.Chunk{c}
	total := int(c.CompressedSize)
	end := c.CompressedOffset + uint64(c.CompressedSize)
	for i := c.Index + 1; i < f.b.ChunkCount(); i++ {
		n, err := f.b.Chunk(i)
		if err != nil || n.Blob != c.Blob || n.CompressedOffset != end || total+int(n.CompressedSize) > f.cfg.AmplifyIO {
			break
		}
		if f.mem.Contains(n.Index) || f.flights.busy(n.Index) || (f.cache != nil && f.cache.Has(n.Digest)) {
			break
		}
		run = append(run, n)
		total += int(n.CompressedSize)
		end += uint64(n.CompressedSize)
	}
	return run
}

// store keeps a verified chunk: in the node cache (stored form, shared with
// the node's peer) and in memory (decoded). A full disk only loses the
// cache copy; the read is served from memory.
func (f *Fetcher) store(k rafs.Chunk, stored, dec []byte, keep bool) {
	if keep || f.cache == nil {
		f.mem.Add(k.Index, dec)
	}
	if f.cache == nil {
		return
	}
	if err := f.cache.PutChunk(k, stored); err != nil {
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
	if f.cfg.ReadaheadChunks <= 0 {
		return
	}
	select {
	case f.raSem <- struct{}{}:
	default:
		return // enough readahead running
	}
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		defer func() { <-f.raSem }()
		for i := idx + 1; i < in.DataCount && i <= idx+uint32(f.cfg.ReadaheadChunks); i++ {
			c, err := f.b.FileChunk(in, i)
			if err != nil {
				return
			}
			if f.mem.Contains(c.Index) {
				continue
			}
			if _, _, err := f.chunk(f.bgCtx, c, modeReadahead); err != nil {
				return
			}
		}
	}()
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
	if f.mem.Contains(c.Index) || (f.cache != nil && f.cache.Has(c.Digest)) {
		return false, nil
	}
	_, _, err = f.chunk(ctx, c, modePrefetch)
	return err == nil, err
}
