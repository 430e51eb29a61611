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
// AmplifyIO bytes, in one backend request; verifies each; caches them.
func (f *Fetcher) fetch(ctx context.Context, c rafs.Chunk, keep bool) ([]byte, string, error) {
	blob, err := f.b.Blob(c.Blob)
	if err != nil {
		return nil, "", err
	}
	run := f.plan(c)
	var lastErr error
	for attempt := 0; attempt < f.cfg.VerifyRetries; attempt++ {
		if attempt > 0 {
			run = run[:1] // retry only what the reader needs
		}
		first, last := run[0], run[len(run)-1]
		end := last.CompressedOffset + uint64(last.CompressedSize)
		stored := make([]byte, end-first.CompressedOffset)
		f.m.inflight.Inc()
		src, err := f.backend.ReadBlobFrom(ctx, blob, int64(first.CompressedOffset), stored)
		f.m.inflight.Dec()
		if err != nil {
			return nil, src, fmt.Errorf("fetch chunk %s (blob %s, bytes %d+%d): %w", c.Digest, blob.Digest, first.CompressedOffset, len(stored), err)
		}
		f.m.backendBytes.WithLabelValues(src).Add(float64(len(stored)))
		var want []byte
		for _, k := range run {
			s := stored[k.CompressedOffset-first.CompressedOffset:][:k.CompressedSize]
			dec := make([]byte, k.Size)
			if err := rafs.DecodeChunk(k, s, dec); err != nil {
				f.m.verifyFailures.Inc()
				f.log.Warn("chunk failed verification", "chunk", k.Digest.String(), "blob", blob.Digest.String(), "source", src, "err", err)
				if k.Index == c.Index {
					lastErr = err
				}
				continue
			}
			f.store(k, s, dec, keep)
			if k.Index == c.Index {
				want = dec
			}
		}
		if want != nil {
			return want, src, nil
		}
	}
	return nil, "", fmt.Errorf("chunk %s of blob %s failed verification %d times: %w", c.Digest, blob.Digest, f.cfg.VerifyRetries, lastErr)
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
