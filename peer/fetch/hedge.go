package fetch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
)

// A hedged request. A parent that makes no progress on a request for
// HedgeDelay (counted from the request, then from each chunk it
// delivers, and from each hedgeProgressBytes it sends: a 4 MiB piece
// through an uplink shared by several children can take longer than the
// delay to arrive whole, and asking again elsewhere then only wastes the
// bytes sent so far; a parent trickling slower than that counts as
// stalled) is not waited for alone: the chunks of the request that are
// still pending are asked for again, wherever the Router now says (its
// count of the first assignment as load on the slow parent lets another
// holder rank first), or from the origin when the Router gives this node
// the turn. Both requests deliver into the same group, which takes the
// first verified copy of each chunk and drops the second. When the hedge
// has got every chunk, the first request is cancelled; when the first
// request has, the hedge is. A request is hedged at most once, and a
// hedge is not hedged again; but when the Router has nobody else to
// offer yet (it may name the slow parent again: connecting to a new peer
// can take longer than the delay), the hedge is tried again after twice
// the delay, until the request ends.

// hedger watches one request to a parent and hedges it when it is slow.
// Its methods are no-ops on a nil *hedger (hedging off).
type hedger struct {
	e       *Engine
	g       *group
	slow    lpeer.ID
	ords    []uint32
	primary context.CancelFunc // cancels the watched request

	ctx  context.Context // the hedge's own, cancelled by finish
	stop context.CancelFunc

	mu    sync.Mutex
	timer *time.Timer
	delay time.Duration
	fired bool // the hedge is running or has sent its requests
	done  bool // finish was called: no hedge starts after it
	wg    sync.WaitGroup
	won   atomic.Bool // the hedge got every chunk and cancelled the request

	// sent counts bytes since the last progress; moved is when the
	// request last made progress (Unix ns), read by fire.
	sent  atomic.Int64
	moved atomic.Int64
}

// hedgeProgressBytes is how many bytes of an answer count as progress.
const hedgeProgressBytes = 64 << 10

// startHedge starts watching a request for batch to parent slow; primary
// cancels that request. ctx bounds the hedge.
func (e *Engine) startHedge(ctx context.Context, primary context.CancelFunc, g *group, slow lpeer.ID, batch []rafs.Chunk) *hedger {
	h := &hedger{e: e, g: g, slow: slow, ords: ordinalsOf(batch), primary: primary, delay: e.cfg.HedgeDelay}
	h.moved.Store(time.Now().UnixNano())
	h.ctx, h.stop = context.WithCancel(ctx)
	// Under the lock: fire takes it first, so a timer that fires at once
	// (a tiny delay on a loaded machine) finds h.timer set.
	h.mu.Lock()
	h.timer = time.AfterFunc(h.delay, h.fire)
	h.mu.Unlock()
	return h
}

// progress notes that the watched request delivered a chunk: the delay
// starts again.
func (h *hedger) progress() {
	if h == nil {
		return
	}
	h.moved.Store(time.Now().UnixNano())
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fired && !h.done {
		h.timer.Reset(h.delay)
	}
}

// bytes notes that the watched request brought n bytes: each
// hedgeProgressBytes of them are progress.
func (h *hedger) bytes(n int) {
	if h == nil {
		return
	}
	if h.sent.Add(int64(n)) >= hedgeProgressBytes {
		h.sent.Store(0)
		h.moved.Store(time.Now().UnixNano())
	}
}

func (h *hedger) fire() {
	h.mu.Lock()
	if h.fired || h.done {
		h.mu.Unlock()
		return
	}
	if since := time.Since(time.Unix(0, h.moved.Load())); since < h.delay {
		// Bytes came meanwhile: wait out the rest of the delay from
		// the last of them.
		h.timer.Reset(h.delay - since)
		h.mu.Unlock()
		return
	}
	h.fired = true
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	cs := h.g.chunks(h.ords)
	if len(cs) == 0 {
		return
	}
	h.e.log.Debug("parent slow; hedging", "peer", h.slow, "blob", h.g.blob, "chunks", len(cs), "after", h.delay)
	if !h.e.hedgeFetch(h.ctx, h.g, h.slow, cs) {
		// Nobody else to ask yet: try again later.
		h.mu.Lock()
		if !h.done {
			h.fired = false
			h.delay *= 2
			h.timer.Reset(h.delay)
		}
		h.mu.Unlock()
		return
	}
	// Every chunk is in (the reads may have gone since, which cancelled
	// the hedge's context, but not before they had them).
	if len(h.g.chunks(h.ords)) == 0 {
		h.won.Store(true)
		h.primary()
	}
}

// finish is called when the watched request returned. If every chunk is
// in, a hedge still running is cancelled; otherwise it is waited for, as
// it may bring what the request did not. It reports whether the hedge
// won (and cancelled the request).
func (h *hedger) finish() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	h.done = true
	h.timer.Stop()
	fired := h.fired
	h.mu.Unlock()
	if fired && len(h.g.chunks(h.ords)) == 0 {
		h.stop()
	}
	h.wg.Wait()
	h.stop()
	return h.won.Load()
}

// hedgeFetch asks for cs, which parent slow is slow to deliver,
// wherever the Router now says other than slow. Without a Router answer
// it asks one parent learnt recently, if there is one other than slow,
// and leaves the origin alone: the slow parent is still sending. It
// reports whether it asked anyone.
func (e *Engine) hedgeFetch(ctx context.Context, g *group, slow lpeer.ID, cs []rafs.Chunk) (asked bool) {
	ask := func() {
		if !asked {
			asked = true
			e.m.hedge()
		}
	}
	ords := ordinalsOf(cs)
	rt, err := e.Route(ctx, g.blob, ords, g.stored)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		fb := decide(e.input(g, g.chunks(ords), nil, slow)).Fallback
		for _, p := range fb.Parents {
			if cs := g.chunks(fb.Chunks); len(cs) > 0 {
				ask()
				e.fetchParent(ctx, g, p, batches(cs, exchangeLimits), false, false)
			}
		}
		return asked
	}
	// Nothing better than the parent already asked (it, or one this
	// node avoids): the assignment goes back (it was slow: reported as
	// failed).
	pl := decide(e.input(g, g.chunks(ords), &rt, slow))
	for _, id := range pl.GiveBack {
		e.router.Report(id, route.Outcome{Blob: g.blob})
	}
	var wg sync.WaitGroup
	now := e.now()
	for _, a := range pl.Parents {
		e.recent.learn(g.blob, a.Named.Info, a.Named.Chunks, now)
		ask()
		wg.Go(func() { e.fetchParent(ctx, g, a.Named.Info, a.Batches, true, false) })
	}
	e.strayTurns(g, pl.Stray)
	if len(pl.Origin) > 0 {
		ask()
		wg.Go(func() { e.fetchOrigin(ctx, g, pl.Origin, true) })
	}
	wg.Wait()
	return asked
}

// bytesFunc is bytes as a callback, nil for a nil hedger.
func (h *hedger) bytesFunc() func(int) {
	if h == nil {
		return nil
	}
	return h.bytes
}
