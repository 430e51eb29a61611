package peer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
)

// A hedged request. A parent that delivers no chunk of a request for
// HedgeDelay (counted from the request, then from each chunk it
// delivers) is not waited for alone: the chunks of the request that are
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
	n       *Node
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
}

// startHedge starts watching a request for batch to parent slow; primary
// cancels that request. ctx bounds the hedge.
func (n *Node) startHedge(ctx context.Context, primary context.CancelFunc, g *group, slow lpeer.ID, batch []rafs.Chunk) *hedger {
	h := &hedger{n: n, g: g, slow: slow, ords: ordinalsOf(batch), primary: primary, delay: n.cfg.HedgeDelay}
	h.ctx, h.stop = context.WithCancel(ctx)
	h.timer = time.AfterFunc(h.delay, h.fire)
	return h
}

// progress notes that the watched request delivered a chunk: the delay
// starts again.
func (h *hedger) progress() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fired && !h.done {
		h.timer.Reset(h.delay)
	}
}

func (h *hedger) fire() {
	h.mu.Lock()
	if h.fired || h.done {
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
	h.n.log.Debug("parent slow; hedging", "peer", h.slow, "blob", h.g.blob, "chunks", len(cs), "after", h.delay)
	if !h.n.hedgeFetch(h.ctx, h.g, h.slow, cs) {
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
func (n *Node) hedgeFetch(ctx context.Context, g *group, slow lpeer.ID, cs []rafs.Chunk) (asked bool) {
	ask := func() {
		if !asked {
			asked = true
			n.m.hedge()
		}
	}
	ords := ordinalsOf(cs)
	rt, err := n.route(ctx, g.blob, ords)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		for _, p := range n.recent.parents(g.blob, ords, 1, time.Now(), func(id lpeer.ID) bool {
			return id == slow || n.skipParent(id)
		}) {
			if cs := g.chunks(ords); len(cs) > 0 {
				ask()
				n.fetchParent(ctx, g, p, cs, false, false)
			}
		}
		return asked
	}
	var wg sync.WaitGroup
	for _, p := range rt.Parents {
		if p.Info.ID == n.h.ID() || len(p.Chunks) == 0 {
			continue
		}
		if p.Info.ID == slow || n.skipParent(p.Info.ID) {
			// Nothing better than the parent already asked: give the
			// assignment back (it was slow: reported as failed).
			n.router.Report(p.Info.ID, route.Outcome{Blob: g.blob})
			continue
		}
		n.recent.learn(g.blob, p.Info, p.Chunks, time.Now())
		if cs := g.chunks(p.Chunks); len(cs) > 0 {
			ask()
			wg.Go(func() { n.fetchParent(ctx, g, p.Info, cs, true, false) })
		}
	}
	n.strayTurns(g, rt.Origin)
	if cs := g.chunks(rt.Origin); len(rt.Origin) > 0 && len(cs) > 0 {
		ask()
		wg.Go(func() { n.fetchOrigin(ctx, g, cs, true) })
	}
	wg.Wait()
	return asked
}

// skipParent reports whether this node does not ask p now: it sent bad
// bytes, or it stalled lately.
func (n *Node) skipParent(p lpeer.ID) bool { return n.avoided(p) || n.slowAvoided(p) }

func ordinalsOf(cs []rafs.Chunk) []uint32 {
	out := make([]uint32, len(cs))
	for i, c := range cs {
		out[i] = c.Ordinal
	}
	return out
}
