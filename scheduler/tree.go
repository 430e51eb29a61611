package scheduler

import (
	"math/bits"
	"slices"
	"time"
)

// Relay trees. When many peers want the same chunk at once, its first
// holder would otherwise be named to all of them and its uplink split as
// many ways: a star, as slow as one peer serving the whole cluster. So a
// parent serves at most Config.TreeMaxChildren outstanding assignments before it is
// full, and a requester whose chunks only full parents hold is told to
// wait, briefly, for their future holders: the peers already assigned
// those chunks (an outstanding lease makes its requester one, as an
// origin turn makes its fetcher one). When a future holder announces
// the chunks it is a parent with room, and the waiters get it. Each
// chunk so spreads down a tree whose fan-out is the cap, and every
// peer's uplink carries a share.
//
// Nobody starves: a requester is served by the best full parent (the
// score ranks the least loaded first) when no future holder of the chunk
// is eligible for it, or when it has been waiting for the chunk longer
// than Config.TreeStarveAfter; a future holder whose lease timed out or was
// reported on stops counting.

const (
	// treeRetry is the RetryAfter of a wait for future holders: about a
	// batch of chunks' transfer time, so that waiters pick up a new
	// holder soon after it announces.
	treeRetry = 100 * time.Millisecond
	// maxWaitsPerPeer bounds the chunks whose wait start is remembered
	// per requester; a chunk that does not fit counts as starved.
	maxWaitsPerPeer = 1024
	// maxTreeFetchers bounds the future holders named in a Wait.
	maxTreeFetchers = 8
)

// full reports whether a parent with pending outstanding assignments
// takes no more while a future holder can serve instead.
func (s *State) full(pending int32) bool { return pending >= int32(s.cfg.TreeMaxChildren) }

// treeWait takes out of q the chunks that only full candidates hold, for
// r to wait for instead, if it should: when every one of them has an
// eligible future holder and r has not waited for any of them past
// TreeStarveAfter. It is all or none: a full parent named for some of the
// chunks might as well serve them all. It returns the wait, naming the
// first maxTreeFetchers future holders found in the lease index, with
// no chunks if there is none. Read lock and rec.
//
// A peer acts on one answer before it asks again, so when parents were
// named for other chunks, Parents makes the wait due at once (RetryAfter
// 0): the requester asks again when those fetches are done, by when the
// future holders it follows may hold the next chunks. So a requester
// trails its future holders chunk by chunk, a relay pipeline.
func (s *State) treeWait(sc *scratch, b *blobState, r *peer, q *request, now time.Time) Wait {
	if b.leased.len() == 0 {
		return Wait{}
	}
	// Chunks left that a full candidate holds, ascending (request space
	// keeps the order).
	contested := sc.fullHeld
	for j := range contested {
		contested[j] &= q.rem[j]
	}
	spots := sc.spots[:0]
	for i, x := range contested {
		for x != 0 {
			spots = append(spots, q.at(i, bits.TrailingZeros64(x)))
			x &= x - 1
		}
	}
	sc.spots = spots
	if len(spots) == 0 {
		return Wait{}
	}
	nowNs := now.UnixNano()
	if ws := r.waits[b.digest]; len(ws) > 0 || r.nwaits >= maxWaitsPerPeer {
		j := 0
		for _, c := range spots {
			for j < len(ws) && ws[j].chunk < c {
				j++
			}
			ok := j < len(ws) && ws[j].chunk == c
			if ok && nowNs-ws[j].since >= s.cfg.TreeStarveAfter.Nanoseconds() {
				return Wait{} // waited long enough: served over the cap
			}
			if !ok && r.nwaits >= maxWaitsPerPeer {
				return Wait{} // cannot remember the wait: do not make it
			}
		}
	}
	// Every spot needs an eligible future holder; name the first
	// maxTreeFetchers found.
	future := append(sc.future[:0], make([]bool, len(spots))...)
	sc.future = future
	fetchers := sc.fetchers[:0]
	covered := 0
	first, last := spots[0], spots[len(spots)-1]
	oldest := nowNs - s.cfg.PeerTTL.Nanoseconds()
	avoid := r.rep != nil && len(r.rep.avoid) > 0
	b.leased.near(spots, func(l *leaseRef) bool {
		if l.hi < first || l.lo > last {
			return true
		}
		p := l.req
		if p == r || p.gone || !now.Before(l.expires) || s.hot[p.slot].seen < oldest || s.banned(p, now) || (avoid && r.rep.avoids(p.id, now)) {
			return true
		}
		// A requester that holds a chunk already is no future holder
		// of it: its lease is one it has not reported on yet (it got
		// the chunk elsewhere, or its report is on the way), and a
		// wait for it would last until TreeStarveAfter for nothing.
		var held Bitset
		if i, ok := p.holdings[b]; ok {
			held = b.row(&b.holders[i])
		}
		k, _ := slices.BinarySearch(spots, l.lo)
		hit := false
		for ; k < len(spots) && spots[k] <= l.hi; k++ {
			if held.Has(spots[k]) {
				continue
			}
			hit = true
			if !future[k] {
				future[k] = true
				covered++
			}
		}
		if hit && len(fetchers) < maxTreeFetchers && !slices.Contains(fetchers, p) {
			fetchers = append(fetchers, p)
		}
		return covered < len(spots) || len(fetchers) < maxTreeFetchers
	})
	defer func() {
		clear(fetchers) // keep no peer alive in the pool
		sc.fetchers = fetchers[:0]
	}()
	if covered < len(spots) {
		return Wait{} // no future holder: served over the cap
	}
	wt := Wait{Chunks: slices.Clone(spots), Fetchers: make([]string, len(fetchers)), RetryAfter: min(treeRetry, s.cfg.WaitRetry)}
	for i, p := range fetchers {
		wt.Fetchers[i] = p.id
	}
	slices.Sort(wt.Fetchers)
	for i, x := range contested {
		q.rem[i] &^= x
	}
	q.left -= len(spots)
	return wt
}
