package fusemount

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	"damselfly/rafs"
)

// prefetcher fetches the prefetch table's files, then (with All) every
// other chunk in blob order, on a few threads under a bandwidth limit.
// It yields to on-demand reads (see Fetcher.Prefetch).
type prefetcher struct {
	wg    sync.WaitGroup
	done  atomic.Int64
	total atomic.Int64
}

func startPrefetch(ctx context.Context, b *rafs.Bootstrap, f *Fetcher, cfg PrefetchConfig, m *Metrics, log *slog.Logger) *prefetcher {
	p := &prefetcher{}
	var lim *rate.Limiter
	if cfg.BandwidthLimit > 0 {
		burst := int(max(cfg.BandwidthLimit, int64(rafs.MaxChunkSize)))
		lim = rate.NewLimiter(rate.Limit(cfg.BandwidthLimit), burst)
	}
	plan := make(chan rafs.Chunk, 64)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(plan)
		seen := map[uint32]bool{}
		send := func(c rafs.Chunk) bool {
			if seen[c.Index] {
				return true
			}
			seen[c.Index] = true
			p.total.Add(1)
			m.prefetchTotal.Set(float64(p.total.Load()))
			select {
			case plan <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		inos, err := b.Prefetch()
		if err != nil {
			log.Warn("prefetch table unreadable", "err", err)
		}
		for _, ino := range inos {
			in, err := b.Inode(ino)
			if err != nil || !in.IsReg() {
				continue
			}
			for i := range in.DataCount {
				c, err := b.FileChunk(in, i)
				if err != nil || !send(c) {
					break
				}
			}
		}
		if !cfg.All {
			return
		}
		for i := range b.ChunkCount() {
			c, err := b.Chunk(i)
			if err != nil || !send(c) {
				return
			}
		}
	}()
	for range max(1, cfg.Threads) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for c := range plan {
				if lim != nil {
					if err := lim.WaitN(ctx, min(int(c.CompressedSize), lim.Burst())); err != nil {
						return
					}
				}
				if _, err := f.Prefetch(ctx, c); err != nil && ctx.Err() == nil {
					log.Debug("prefetch of a chunk failed; readers will fetch it on demand", "chunk", c.Digest.String(), "err", err)
				}
				m.prefetchDone.Set(float64(p.done.Add(1)))
			}
		}()
	}
	return p
}

func (p *prefetcher) wait() { p.wg.Wait() }
