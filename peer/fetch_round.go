package peer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
)

// round asks the Router where the pending chunks of g are and fetches
// them: from the parents it names (several at once) and from the origin
// when it is this node's turn. Without a Router answer it asks the
// parents it learnt recently, then the origin. It returns the Router's
// shortest "ask again after" and whether there was one.
func (n *Node) round(ctx context.Context, g *group) (retryAfter time.Duration, waited bool) {
	ords := g.ordinals()
	route, err := n.route(ctx, g.blob, ords)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false
		}
		n.log.Debug("no route; using recent parents and the origin", "blob", g.blob, "err", err)
		n.fallback(ctx, g, ords)
		return 0, false
	}
	now := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, n.cfg.MaxParallelParents)
	var elsewhere []uint32
	for _, p := range route.Parents {
		if p.Info.ID == n.h.ID() || len(p.Chunks) == 0 {
			continue
		}
		n.recent.learn(g.blob, p.Info, p.Chunks, now)
		if n.avoided(p.Info.ID) {
			// The Router has not taken our report yet. Say the assignment
			// failed (which also ends its lease) and ask again soon.
			n.router.Report(p.Info.ID, Outcome{Blob: g.blob})
			retryAfter, waited = minWait(retryAfter, waited, minRetryDelay)
			continue
		}
		if n.slowAvoided(p.Info.ID) {
			// p stalled on this node lately, which the Router cannot
			// know for sure (its health only fell), so it may name p
			// again while p is the only holder. End the assignment and
			// get its chunks from recent parents or the origin now.
			n.router.Report(p.Info.ID, Outcome{Blob: g.blob})
			elsewhere = append(elsewhere, p.Chunks...)
			continue
		}
		cs := g.chunks(p.Chunks)
		if len(p.Chunks) == 0 || len(cs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			n.fetchParent(ctx, g, p.Info, cs, true, true)
		}()
	}
	if len(elsewhere) > 0 {
		slices.Sort(elsewhere)
		wg.Go(func() { n.fallback(ctx, g, elsewhere) })
	}
	if cs := g.chunks(route.Origin); len(route.Origin) > 0 && len(cs) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.fetchOrigin(ctx, g, cs, true)
		}()
	}
	for _, w := range route.Wait {
		retryAfter, waited = minWait(retryAfter, waited, w.RetryAfter)
	}
	wg.Wait()
	return retryAfter, waited
}

func minWait(cur time.Duration, set bool, d time.Duration) (time.Duration, bool) {
	if !set || d < cur {
		return d, true
	}
	return cur, true
}

// route asks the Router about ords, in queries of at most maxRoute
// ordinals, each bounded by RouteTimeout. Any failure fails the whole.
func (n *Node) route(ctx context.Context, blob rafs.Digest, ords []uint32) (Route, error) {
	var all Route
	for len(ords) > 0 {
		part := ords[:min(len(ords), maxRoute)]
		ords = ords[len(part):]
		rctx, cancel := context.WithTimeout(ctx, n.cfg.RouteTimeout)
		r, err := n.router.Route(rctx, blob, part)
		cancel()
		if err != nil {
			if !errors.Is(err, ErrNoRoute) {
				n.log.Warn("router failed", "blob", blob, "err", err)
			}
			return Route{}, err
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
