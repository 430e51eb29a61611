package fetch

import (
	"sync/atomic"
	"time"
)

// slowFetch is how long a group's fetch may take before it is logged,
// with what it did: a read waits on it, and a healthy cluster serves a
// batch in well under a second.
const slowFetch = 5 * time.Second

// trace counts what one group's fetch did, for the log line of a slow
// one. Fields are updated from the fetch's goroutines.
type trace struct {
	start     time.Time
	chunks    int          // pending when the fetch began
	rounds    atomic.Int32 // Router rounds
	answers   atomic.Int32 // Route and RouteWait answers
	waits     atomic.Int32 // chunks answers said to wait for, summed
	parents   atomic.Int32 // requests to parents (named, recent or hedges)
	turns     atomic.Int32 // chunks granted as this node's origin turns
	origin    atomic.Int32 // origin reads (runs)
	fallbacks atomic.Int32 // times the Router was not there to answer
}

// logSlow logs g's fetch if it took slowFetch or more.
func (e *Engine) logSlow(g *group) {
	tr := &g.tr
	took := time.Since(tr.start)
	if took < slowFetch {
		return
	}
	g.mu.Lock()
	left, lastErr := len(g.pending), g.lastErr
	g.mu.Unlock()
	args := []any{"blob", g.blob, "chunks", tr.chunks, "left", left, "took", took.Round(time.Millisecond),
		"rounds", tr.rounds.Load(), "answers", tr.answers.Load(), "waited_chunks", tr.waits.Load(),
		"parent_requests", tr.parents.Load(), "origin_turns", tr.turns.Load(), "origin_reads", tr.origin.Load(),
		"no_router", tr.fallbacks.Load()}
	if lastErr != nil {
		args = append(args, "last_err", lastErr)
	}
	e.log.Warn("slow fetch", args...)
}
