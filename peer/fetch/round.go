package fetch

import (
	"context"
	"errors"
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/peer/exchange"
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
func (e *Engine) round(ctx context.Context, g *group) (retryAfter time.Duration, waited bool) {
	ords := g.ordinals()
	rt, err := e.Route(ctx, g.blob, ords, g.stored)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false
		}
		g.tr.fallbacks.Add(1)
		e.log.Debug("no route; using recent parents and the origin", "blob", g.blob, "err", err)
		e.fallback(ctx, g, decide(e.input(g, g.chunks(nil), nil, "")).Fallback)
		return 0, false
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, e.cfg.MaxParallelParents)
	rw, holds := e.router.(RouteWaiter)
	left, progressed := g.left(), time.Now()
	for {
		wait, retry, any := e.dispatch(ctx, g, rt, &wg, sem)
		if !any || !holds || len(wait) == 0 || len(wait) > maxRoute || ctx.Err() != nil {
			return retry, any
		}
		// Give up waiting here, as the caller would, once the group
		// went FetchDeadline without a chunk arriving.
		if l := g.left(); l < left {
			left, progressed = l, time.Now()
		}
		if time.Since(progressed) >= e.cfg.FetchDeadline {
			return retry, any
		}
		hold := max(min(retry, e.cfg.MaxRetryDelay), minRetryDelay/5)
		asked := time.Now()
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RouteTimeout+hold)
		rt, err = rw.RouteWait(rctx, g.blob, wait, g.stored(wait), hold)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				g.tr.fallbacks.Add(1)
				wg.Go(func() { e.fallback(ctx, g, decide(e.input(g, g.chunks(wait), nil, "")).Fallback) })
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
// of g, as decide plans them: from its parents (at most cap(sem) at
// once), from recent parents and the origin for the chunks of parents
// this node avoids, and from the origin for this node's turns. It
// returns the pending chunks to ask about again (ascending), the
// shortest "ask again after" among them, and whether there are any.
func (e *Engine) dispatch(ctx context.Context, g *group, rt route.Route, wg *sync.WaitGroup, sem chan struct{}) (wait []uint32, retryAfter time.Duration, waited bool) {
	g.tr.answers.Add(1)
	// Every parent named is remembered, avoided or not, for the rounds
	// the Router does not answer.
	now := e.now()
	for _, p := range rt.Parents {
		if p.Info.ID != e.h.ID() && len(p.Chunks) > 0 {
			e.recent.learn(g.blob, p.Info, p.Chunks, now)
		}
	}
	pl := decide(e.input(g, g.chunks(nil), &rt, ""))
	for _, id := range pl.GiveBack {
		e.router.Report(id, route.Outcome{Blob: g.blob})
	}
	for _, a := range pl.Parents {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			e.fetchParent(ctx, g, a.Named.Info, a.Batches, true, true)
		})
	}
	if len(pl.Fallback.Chunks) > 0 {
		wg.Go(func() { e.fallback(ctx, g, pl.Fallback) })
	}
	e.strayTurns(g, pl.Stray)
	if len(pl.Origin) > 0 {
		g.tr.turns.Add(int32(len(pl.Origin)))
		wg.Go(func() { e.fetchOrigin(ctx, g, pl.Origin, true) })
	}
	g.tr.waits.Add(int32(len(pl.Wait)))
	return pl.Wait, pl.RetryAfter, pl.Waited
}

// input gathers what decide needs about pending chunks of g: rt (nil
// when the Router did not answer), the peers avoided, the parents
// learnt recently and, with slow, that it is a hedge of slow's request.
func (e *Engine) input(g *group, pending []rafs.Chunk, rt *route.Route, slow lpeer.ID) Input {
	now := e.now()
	return Input{
		Self: e.h.ID(), Route: rt, Pending: pending,
		Avoid: e.avoidSnapshot(), Now: now,
		Recent: e.recent.known(g.blob, ordinalsOf(pending), now),
		Hedge:  slow != "", Slow: slow,
		Limits: exchangeLimits,
	}
}

// exchangeLimits are the chunk exchange's bounds on one request.
var exchangeLimits = Limits{MaxChunks: exchange.MaxChunksPerBatch, MaxBytes: exchange.MaxBatchBytes}

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

// Route asks the Router about ords, in queries of at most maxRoute
// ordinals, each bounded by RouteTimeout and giving its chunks' stored
// size from stored (nil: not known). Any failure fails the whole.
func (e *Engine) Route(ctx context.Context, blob rafs.Digest, ords []uint32, stored func([]uint32) uint64) (route.Route, error) {
	var all route.Route
	for len(ords) > 0 {
		part := ords[:min(len(ords), maxRoute)]
		ords = ords[len(part):]
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RouteTimeout)
		var bytes uint64
		if stored != nil {
			bytes = stored(part)
		}
		r, err := e.router.Route(rctx, blob, part, bytes)
		cancel()
		if err != nil {
			if !errors.Is(err, route.ErrNoRoute) {
				e.log.Warn("router failed", "blob", blob, "err", err)
			}
			return route.Route{}, err
		}
		all.Parents = append(all.Parents, r.Parents...)
		all.Origin = append(all.Origin, r.Origin...)
		all.Wait = append(all.Wait, r.Wait...)
	}
	return all, nil
}

// fallback fetches the pending chunks of fb without the Router: from
// its recent parents, one after the other, each asked for what is still
// pending, then (with fb.Origin) the rest from the origin. It reports
// whether it asked anyone.
func (e *Engine) fallback(ctx context.Context, g *group, fb Fallback) (asked bool) {
	for _, p := range fb.Parents {
		cs := g.chunks(fb.Chunks)
		if len(cs) == 0 {
			return asked
		}
		asked = true
		e.fetchParent(ctx, g, p, batches(cs, exchangeLimits), false, false)
	}
	if !fb.Origin {
		return asked
	}
	if cs := g.chunks(fb.Chunks); len(cs) > 0 && ctx.Err() == nil {
		asked = true
		e.fetchOrigin(ctx, g, cs, false)
	}
	return asked
}
