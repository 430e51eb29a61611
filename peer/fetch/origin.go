package fetch

import (
	"context"
	"fmt"
	"sync"

	"damselfly/rafs"
	"damselfly/rafs/runs"
)

// fetchOrigin fetches cs from the origin, adjacent chunks merged into
// ranged GETs of up to OriginMaxRange (runs.Merge), a few at once. Each
// chunk is verified before it is cached, handed on and announced. With turn (the
// Router gave this node the turn), failed chunks are abandoned so that
// another peer gets the turn. A permanent origin error fails its chunks
// at once; a transient one leaves them for the next round. A chunk whose
// bytes from the origin fail verification fails at once too: the
// registry holds the blob the manifest pins, so the request's description
// of the chunk (digest, algorithm, offset, sizes) is wrong, and asking
// again until FetchDeadline would only load the registry.
func (e *Engine) fetchOrigin(ctx context.Context, g *group, cs []rafs.Chunk, turn bool) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, e.cfg.MaxParallelOrigin)
	for _, run := range runs.Merge(cs, uint64(e.cfg.OriginMaxRange)) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e.fetchRun(ctx, g, run, turn)
		}()
	}
	wg.Wait()
}

// fetchRun fetches one run from the origin. With a StreamingOrigin each
// chunk is verified, on a goroutine of its own, as soon as its bytes are
// in, while the rest of the run arrives; a read that fails part-way
// keeps the chunks that arrived whole.
func (e *Engine) fetchRun(ctx context.Context, g *group, run runs.Run, turn bool) {
	ords := func(cs []rafs.Chunk) []uint32 {
		out := make([]uint32, len(cs))
		for i, c := range cs {
			out[i] = c.Ordinal
		}
		return out
	}
	g.tr.origin.Add(1)
	if !turn {
		e.m.unscheduledOrigin()
	}
	// buf is this run's own: the chunks keep their slices of it.
	buf := make([]byte, run.Len())
	arrived := make(chan rafs.Chunk, len(run.Chunks))
	next, filled := 0, 0 // chunks sent to the verifier, bytes of buf in
	progress := func(k int) {
		filled = k
		for next < len(run.Chunks) {
			c := run.Chunks[next]
			if c.CompressedOffset-run.Off+uint64(c.CompressedSize) > uint64(k) {
				break
			}
			arrived <- c
			next++
		}
	}
	var bad []uint32
	verified := make(chan struct{})
	go func() {
		defer close(verified)
		scratch := getScratch()
		defer putScratch(scratch)
		for c := range arrived {
			stored := run.Stored(buf, c)
			if err := rafs.VerifyChunk(c, stored, scratch); err != nil {
				bad = append(bad, c.Ordinal)
				err = fmt.Errorf("origin: chunk %d of blob %s fails verification: %w", c.Ordinal, g.atOrigin, err)
				e.log.Warn("origin bytes fail verification; failing the chunk", "err", err)
				e.failNow(g, []rafs.Chunk{c}, err)
				continue
			}
			e.keep(g, c, stored, SourceOrigin, false) // a slice of the run's buffer
		}
	}()
	var err error
	if so, ok := e.origin.(StreamingOrigin); ok {
		err = so.ReadRangeFunc(ctx, g.up, g.atOrigin, int64(run.Off), buf, progress)
	} else if err = e.origin.ReadRange(ctx, g.up, g.atOrigin, int64(run.Off), buf); err == nil {
		progress(len(buf))
	}
	close(arrived)
	<-verified
	if filled > 0 {
		e.m.originRequest(filled)
	}
	if turn && len(bad) > 0 {
		e.router.Abandon(g.blob, bad)
	}
	if err == nil {
		return
	}
	rest := run.Chunks[next:] // the chunks that did not arrive whole
	if turn {
		e.router.Abandon(g.blob, ords(rest))
	}
	if ctx.Err() != nil {
		return
	}
	err = fmt.Errorf("origin: read %d bytes at %d of blob %s: %w", len(buf), int64(run.Off), g.atOrigin, err)
	if !e.transient(err) {
		e.failNow(g, rest, err)
		return
	}
	e.log.Debug("origin failed; will retry", "err", err)
	g.noteErr(err)
}

// scratchPool holds buffers for the decoded bytes of chunks being
// verified, which are thrown away: a fresh 1 MiB buffer per chunk costs
// its zeroing and the garbage collector's time.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

func getScratch() *[]byte  { return scratchPool.Get().(*[]byte) }
func putScratch(b *[]byte) { scratchPool.Put(b) }
