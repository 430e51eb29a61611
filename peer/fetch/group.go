package fetch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/backoff"
	"damselfly/rafs/registry"
)

// Bounds of the retry loop of a batch.
const (
	minRetryDelay = 50 * time.Millisecond
	maxRoute      = 1024 // ordinals per Route call, as the scheduler bounds a query
)

// errNoSource is the reason given when a chunk was never offered by any
// source within the deadline.
var errNoSource = errors.New("no peer holds it and the origin did not serve it")

// group is the state of one batch's fetch: the chunks still pending,
// by ordinal, and what the current round achieved.
type group struct {
	blob     rafs.Digest // as the Router, the holdings and parents know it
	atOrigin rafs.Digest // as the origin registry knows it
	up       registry.Ref
	keeping  *sync.WaitGroup // the fetch's cache writes in the background
	// probed is Engine.kept when the reads leading the group looked in
	// the cache: if chunks were kept since, the first round looks again.
	probed uint64

	// all are the group's flights by ordinal, pending or not; set
	// before the fetch starts and not changed after.
	all map[uint32]*chunkFlight

	mu       sync.Mutex
	pending  map[uint32]wanted
	progress bool
	lastErr  error

	tr trace
}

// take removes ordinal o from the pending chunks and returns its flight,
// or nil if it is not pending.
func (g *group) take(o uint32) *chunkFlight {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, ok := g.pending[o]
	if !ok {
		return nil
	}
	delete(g.pending, o)
	g.progress = true
	return w.f
}

func (g *group) noteErr(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
}

// chunks returns the pending chunks of ords, or all pending chunks if
// ords is nil (callers check for an empty list first), ascending by
// ordinal.
func (g *group) chunks(ords []uint32) []rafs.Chunk {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []rafs.Chunk
	if ords == nil {
		for _, w := range g.pending {
			out = append(out, w.c)
		}
		slices.SortFunc(out, func(a, b rafs.Chunk) int { return int(int64(a.Ordinal) - int64(b.Ordinal)) })
		return out
	}
	for _, o := range ords {
		if w, ok := g.pending[o]; ok {
			out = append(out, w.c)
		}
	}
	return out
}

// pendingOf returns the chunks of ords that are still pending, ascending
// and without duplicates.
func (g *group) pendingOf(ords []uint32) []uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uint32, 0, len(ords))
	for _, o := range ords {
		if _, ok := g.pending[o]; ok {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// stored is the stored size of the pending chunks among ords, as route
// queries give it.
func (g *group) stored(ords []uint32) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n uint64
	for _, o := range ords {
		if w, ok := g.pending[o]; ok {
			n += uint64(w.c.CompressedSize)
		}
	}
	return n
}

func (g *group) ordinals() []uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uint32, 0, len(g.pending))
	for o := range g.pending {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

func (g *group) left() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// fetch gets the chunks of the flights it leads and finishes every one of
// them, with its bytes or an error, before it returns.
func (e *Engine) fetch(ctx context.Context, up registry.Ref, blob, atOrigin rafs.Digest, lead []wanted, probed uint64) {
	all := lead
	var keeping sync.WaitGroup
	defer func() {
		// Any origin turns this node holds for chunks that did not come
		// go back now: the other peers the scheduler told to wait for
		// them would otherwise wait until it gave up on this node
		// (origin_timeout). The fetch of a turn's run abandons it when
		// the run fails, but not the runs still queued when the reads
		// went away, nor turns granted in an answer that came as they did.
		e.abandonMissing(blob, all)
		// Flights still unfinished were cancelled: no read waits for them
		// (finish ignores the others).
		err := ctx.Err()
		if err == nil {
			err = errors.New("fetch ended early")
		}
		if e.life.Err() != nil {
			err = ErrClosed
		}
		for _, w := range all {
			e.finish(w.f, rafs.Chunk{}, nil, err, true)
		}
	}()
	defer keeping.Wait() // before the cleanup above: a flight is done only once kept
	// The protocol names chunks by ordinal: a batch with two chunks of one
	// ordinal (only a broken request has them) is fetched in groups.
	for len(lead) > 0 && ctx.Err() == nil {
		g := &group{blob: blob, atOrigin: atOrigin, up: up, keeping: &keeping, probed: probed, pending: make(map[uint32]wanted), all: make(map[uint32]*chunkFlight)}
		var rest []wanted
		for _, w := range lead {
			if _, dup := g.pending[w.c.Ordinal]; dup {
				rest = append(rest, w)
				continue
			}
			g.pending[w.c.Ordinal] = w
			g.all[w.c.Ordinal] = w.f
		}
		e.fetchGroup(ctx, g)
		lead = rest
	}
}

// strayTurns gives back the origin turns of an answer for chunks of g
// that are no longer pending and whose flights are done: they came
// another way (the node cache, a parent) or failed while the answer was
// on its way, and nothing else would end those turns before
// OriginTimeout if the node's announcement of the chunk went out before
// the turn was granted. A chunk still being kept is left alone: its
// announcement, after the grant, ends the turn.
func (e *Engine) strayTurns(g *group, origin []uint32) {
	var stray []uint32
	g.mu.Lock()
	for _, o := range origin {
		if _, pending := g.pending[o]; !pending && g.all[o] != nil && g.all[o].Settled() {
			stray = append(stray, o)
		}
	}
	g.mu.Unlock()
	if len(stray) > 0 {
		e.m.strayTurns(len(stray))
		e.router.Abandon(g.blob, stray)
	}
}

// abandonMissing gives up this node's origin turns, if it holds any, for
// the chunks of ws that did not arrive: unfinished or failed.
func (e *Engine) abandonMissing(blob rafs.Digest, ws []wanted) {
	var missing []uint32
	for _, w := range ws {
		if !w.f.Resolved() {
			missing = append(missing, w.c.Ordinal)
		} else if _, err := w.f.Result(); err != nil {
			missing = append(missing, w.c.Ordinal)
		}
	}
	if len(missing) > 0 {
		e.router.Abandon(blob, missing)
	}
}

// fetchGroup runs rounds until every pending chunk arrived, failed for
// good, or went FetchDeadline without any chunk of the group arriving.
// The first round goes out at once: the reads that lead the group's
// flights found its chunks missing from the cache a moment ago (one
// lookup per chunk per read, read.go), unless a chunk was kept since
// then (another read's fetch may have cached one of them and left the
// group between that lookup and this fetch's start: it would otherwise
// come from the origin again). Before each later round the cache is
// looked at again, as another read may have brought a chunk since.
func (e *Engine) fetchGroup(ctx context.Context, g *group) {
	g.tr.start, g.tr.chunks = time.Now(), g.left()
	defer e.logSlow(g)
	deadline := time.Now().Add(e.cfg.FetchDeadline)
	// Rounds that got nothing back off on the project's one schedule,
	// from about minRetryDelay up to MaxRetryDelay, with jitter so that
	// peers stuck on the same chunks do not ask in step.
	retry := backoff.Schedule{First: 2 * minRetryDelay, Max: e.cfg.MaxRetryDelay}
	failed := 0
	for first := true; g.left() > 0 && ctx.Err() == nil; first = false {
		if !first || e.kept.Load() != g.probed {
			e.fromCache(g)
			if g.left() == 0 {
				return
			}
		}
		g.progress = false
		g.tr.rounds.Add(1)
		retryAfter, waited := e.round(ctx, g)
		if g.left() == 0 || ctx.Err() != nil {
			return
		}
		now := time.Now()
		if g.progress {
			deadline = now.Add(e.cfg.FetchDeadline)
			failed = 0
		}
		if !now.Before(deadline) {
			e.failPending(g)
			return
		}
		var delay time.Duration
		switch {
		case waited:
			delay = max(min(retryAfter, e.cfg.MaxRetryDelay), minRetryDelay/5)
		case g.progress:
			delay = 0 // go again at once for the chunks that were missing
		default:
			failed++
			delay = retry.Delay(failed, rand.Float64())
		}
		delay = min(delay, time.Until(deadline))
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// failPending fails every pending chunk of g: the deadline passed.
func (e *Engine) failPending(g *group) {
	g.mu.Lock()
	reason := g.lastErr
	if reason == nil {
		reason = errNoSource
	}
	ws := make([]wanted, 0, len(g.pending))
	for o, w := range g.pending {
		ws = append(ws, w)
		delete(g.pending, o)
	}
	g.mu.Unlock()
	for _, w := range ws {
		e.finish(w.f, rafs.Chunk{}, nil, fmt.Errorf("chunk %d of blob %s: nothing served it for %v: %w",
			w.c.Ordinal, g.blob, e.cfg.FetchDeadline, reason), true)
	}
}

// failNow fails pending chunks of g at once, for a permanent error.
func (e *Engine) failNow(g *group, cs []rafs.Chunk, err error) {
	for _, c := range cs {
		if f := g.take(c.Ordinal); f != nil {
			e.finish(f, rafs.Chunk{}, nil, err, false)
		}
	}
}
