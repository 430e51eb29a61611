package peer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
)

// round asks the Router where the pending chunks of g are and fetches
// them: from the parents it names (several at once) and from the origin
// when it is this node's turn. Without a Router answer it asks the
// parents it learnt recently, then the origin. It returns once every
// fetch it started has ended, with the Router's shortest "ask again
// after" for the chunks still to wait for, and whether there was one.
//
// With a RouteWaiter the waits are not left to the caller: while the
// fetches run, the chunks to wait for are routed again at once, held by
// the Router until one of them has a new holder or an origin turn, and
// whatever that names is fetched alongside. So a chunk another peer
// announces is fetched within a round trip of the announcement, not
// after the batch's other fetches and a poll.
func (n *Node) round(ctx context.Context, g *group) (retryAfter time.Duration, waited bool) {
	ords := g.ordinals()
	rt, err := n.route(ctx, g.blob, ords)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false
		}
		g.tr.fallbacks.Add(1)
		n.log.Debug("no route; using recent parents and the origin", "blob", g.blob, "err", err)
		n.fallback(ctx, g, ords)
		return 0, false
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, n.cfg.MaxParallelParents)
	rw, holds := n.router.(RouteWaiter)
	left, progressed := g.left(), time.Now()
	for {
		wait, retry, any := n.dispatch(ctx, g, rt, &wg, sem)
		if !any || !holds || len(wait) == 0 || len(wait) > maxRoute || ctx.Err() != nil {
			return retry, any
		}
		// Give up waiting here, as the caller would, once the group
		// went FetchDeadline without a chunk arriving.
		if l := g.left(); l < left {
			left, progressed = l, time.Now()
		}
		if time.Since(progressed) >= n.cfg.FetchDeadline {
			return retry, any
		}
		hold := max(min(retry, n.cfg.MaxRetryDelay), minRetryDelay/5)
		asked := time.Now()
		rctx, cancel := context.WithTimeout(ctx, n.cfg.RouteTimeout+hold)
		rt, err = rw.RouteWait(rctx, g.blob, wait, hold)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				g.tr.fallbacks.Add(1)
				wg.Go(func() { n.fallback(ctx, g, wait) })
			}
			return 0, false
		}
		// A router that answered "wait" at once (a short RetryAfter, or
		// one that does not hold) is not asked again sooner than this.
		if len(rt.Parents) == 0 && len(rt.Origin) == 0 {
			if d := minRetryDelay/5 - time.Since(asked); d > 0 && !sleep(ctx, d) {
				return 0, false
			}
		}
	}
}

// dispatch starts, in wg, the fetches route names for the pending chunks
// of g: from its parents (at most cap(sem) at once) and from the origin
// for this node's turns. It returns the pending chunks to ask about
// again (ascending), the shortest "ask again after" among them, and
// whether there are any.
func (n *Node) dispatch(ctx context.Context, g *group, rt route.Route, wg *sync.WaitGroup, sem chan struct{}) (wait []uint32, retryAfter time.Duration, waited bool) {
	now := time.Now()
	g.tr.answers.Add(1)
	var elsewhere []uint32
	for _, p := range rt.Parents {
		if p.Info.ID == n.h.ID() || len(p.Chunks) == 0 {
			continue
		}
		n.recent.learn(g.blob, p.Info, p.Chunks, now)
		if n.skipParent(p.Info.ID) {
			// p sent this node bad bytes or stalled on it lately. The
			// Router may name it again all the same: it has not taken
			// the report yet, lost it with a restart, or (for a stall,
			// which it cannot know for sure) only lowered p's health
			// while p is the only holder. Waiting for it to change its
			// answer could take until FetchDeadline, so end the
			// assignment (and its lease) and get the chunks from recent
			// parents or the origin now.
			n.router.Report(p.Info.ID, route.Outcome{Blob: g.blob})
			elsewhere = append(elsewhere, p.Chunks...)
			continue
		}
		cs := g.chunks(p.Chunks)
		if len(cs) == 0 {
			continue
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			n.fetchParent(ctx, g, p.Info, cs, true, true)
		})
	}
	if len(elsewhere) > 0 {
		slices.Sort(elsewhere)
		wg.Go(func() { n.fallback(ctx, g, elsewhere) })
	}
	n.strayTurns(g, rt.Origin)
	if cs := g.chunks(rt.Origin); len(rt.Origin) > 0 && len(cs) > 0 {
		g.tr.turns.Add(int32(len(cs)))
		wg.Go(func() { n.fetchOrigin(ctx, g, cs, true) })
	}
	for _, w := range rt.Wait {
		retryAfter, waited = minWait(retryAfter, waited, w.RetryAfter)
		wait = append(wait, w.Chunks...)
	}
	wait = g.pendingOf(wait)
	g.tr.waits.Add(int32(len(wait)))
	return wait, retryAfter, waited
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func minWait(cur time.Duration, set bool, d time.Duration) (time.Duration, bool) {
	if !set || d < cur {
		return d, true
	}
	return cur, true
}

// route asks the Router about ords, in queries of at most maxRoute
// ordinals, each bounded by RouteTimeout. Any failure fails the whole.
func (n *Node) route(ctx context.Context, blob rafs.Digest, ords []uint32) (route.Route, error) {
	var all route.Route
	for len(ords) > 0 {
		part := ords[:min(len(ords), maxRoute)]
		ords = ords[len(part):]
		rctx, cancel := context.WithTimeout(ctx, n.cfg.RouteTimeout)
		r, err := n.router.Route(rctx, blob, part)
		cancel()
		if err != nil {
			if !errors.Is(err, route.ErrNoRoute) {
				n.log.Warn("router failed", "blob", blob, "err", err)
			}
			return route.Route{}, err
		}
		all.Parents = append(all.Parents, r.Parents...)
		all.Origin = append(all.Origin, r.Origin...)
		all.Wait = append(all.Wait, r.Wait...)
	}
	return all, nil
}

// fallback fetches the pending chunks of ords without the Router: from
// up to recentFallbackTo parents it learnt recently for the blob, one
// after the other, then the rest from the origin.
func (n *Node) fallback(ctx context.Context, g *group, ords []uint32) {
	for _, p := range n.recent.parents(g.blob, ords, recentFallbackTo, time.Now(), func(id lpeer.ID) bool {
		return id == n.h.ID() || n.skipParent(id)
	}) {
		cs := g.chunks(ords)
		if len(cs) == 0 {
			return
		}
		n.fetchParent(ctx, g, p, cs, false, false)
	}
	if cs := g.chunks(ords); len(cs) > 0 && ctx.Err() == nil {
		n.fetchOrigin(ctx, g, cs, false)
	}
}
