package scheduler

import (
	"math/bits"
	"slices"
	"time"
)

// scratch is one query's working space, pooled so that queries running in
// parallel under the read lock do not allocate it each time.
type scratch struct {
	want []uint32
	rem  []uint64
	// turnSize is what an origin turn of this query counts for (turnSize).
	turnSize uint32
	cands    []cand
	masks    []uint64 // coverage of cands[i] is masks[i*W:(i+1)*W], W = len(rem)
	chosen   []*peer  // the peers of Answer.Parents, in order
	// fullHeld is what full candidates hold, in request space (tree.go).
	fullHeld []uint64
	// For treeWait: the chunks left that only full candidates hold, and
	// whether each has a future holder; future holders.
	spots    []uint32
	future   []bool
	fetchers []*peer
	// covered is what the candidates hold, in request space, while a
	// sampled visit runs (candidates).
	covered []uint64
	// anyFull is whether some candidate is full (tree.go), nonFull how
	// many are not.
	anyFull bool
	nonFull int
}

func newScratch() any { return new(scratch) }

// cand is one possible parent during a query.
type cand struct {
	slot  int32
	gain  int32   // chunks of the request it holds, as of the last look
	full  bool    // at its cap of children (tree.go)
	score float64 // see score.go
}

// candidates fills sc.cands and sc.masks with the holders of b that may
// serve r and hold some of q, and sc.fullHeld with what the full ones
// hold. Read lock.
//
// A blob with more than Config.ParentSample holders is sampled: its
// holders are visited in memory order from a random start (in order, so
// their rows stream through the cache; a random stride was 2.6-2.9x
// slower at 1,000 holders), those on r's host are all taken, and of the
// other locality tiers (r's rack, r's zone, elsewhere) only the first
// ParentSample eligible holders found in each. The costly part of a
// query (masks, scores, the greedy rounds) is then the same with a
// thousand holders as with a hundred, and concurrent queries look at
// different holders. Sampling never hides a chunk: a holder past its
// tier's share is still taken if it holds a chunk of q no candidate taken
// so far holds, so a chunk an eligible holder has is never sent to origin
// coordination for want of a look. Once the candidates cover q, a holder
// past its tier's share costs only a look at its labels.
func (s *State) candidates(sc *scratch, b *blobState, r *peer, q *request, now time.Time) {
	w := len(q.rem)
	cs := sc.cands[:0]
	masks := slices.Grow(sc.masks[:0], len(b.holders)*w)[:len(b.holders)*w]
	full := append(sc.fullHeld[:0], make([]uint64, w)...)
	sc.anyFull, sc.nonFull = false, 0
	nowNs, oldest := now.UnixNano(), now.UnixNano()-s.cfg.PeerTTL.Nanoseconds()
	avoid := r.rep != nil && len(r.rep.avoid) > 0
	rh := &s.hot[r.slot]
	hot := s.hot
	jit := s.newJitter()
	n := len(b.holders)
	limit := s.cfg.ParentSample
	sampled := limit > 0 && n > limit
	at := 0
	var covered []uint64 // union of the candidates' masks, when sampled
	seen := 0            // its size
	var taken [numTiers]int
	if sampled {
		at = int(jit.uint64() % uint64(n))
		covered = append(sc.covered[:0], make([]uint64, w)...)
		sc.covered = covered
	}
	for range n {
		h := &b.holders[at]
		if at++; at == n {
			at = 0
		}
		if h.slot == r.slot {
			continue
		}
		ph := &hot[h.slot]
		lw := locality(rh, ph)
		tier, open := 0, true
		if sampled {
			tier = tierOf(lw)
			open = tier == tierHost || taken[tier] < limit
			if !open && seen == q.left {
				continue // a full share of this tier, and q covered
			}
		}
		k := len(cs) * w // the next candidate's mask, written over if not one
		m := masks[k : k+w : k+w]
		g := q.restrict(b.row(h), m)
		if g == 0 {
			continue
		}
		if ph.seen < oldest || nowNs < ph.bannedUntil || (avoid && r.rep.avoids(s.bySlot[h.slot].id, now)) {
			continue
		}
		if sampled {
			fresh := 0
			for j, x := range m {
				fresh += bits.OnesCount64(x &^ covered[j])
				covered[j] |= x
			}
			if !open && fresh == 0 {
				continue
			}
			seen += fresh
			taken[tier]++
		}
		score := lw * ph.quality() * jit.next()
		isFull := s.full(ph.pending.Load())
		if isFull {
			sc.anyFull = true
			for j := range full {
				full[j] |= m[j]
			}
		} else {
			sc.nonFull++
		}
		cs = append(cs, cand{slot: h.slot, gain: int32(g), full: isFull, score: score})
	}
	sc.cands, sc.masks, sc.fullHeld = cs, masks[:len(cs)*w], full
}

// Locality tiers of a sampled visit (see candidates).
const (
	tierHost = iota
	tierRack
	tierZone
	tierElsewhere
	numTiers
)

// tierOf returns the tier of a locality weight.
func tierOf(lw float64) int {
	switch lw {
	case weightHost:
		return tierHost
	case weightRack:
		return tierRack
	case weightZone:
		return tierZone
	}
	return tierElsewhere
}

// choose names parents from sc.cands until q is covered, no candidate
// holds what is left, or MaxParents are named: each round takes the
// candidate with the largest remaining coverage × score (greedy weighted
// set cover). Full candidates (tree.go) take part only if withFull.
// Coverage only falls from round to round, so a candidate whose last
// coverage × score cannot beat the best found so far is skipped without
// a recount; a later call (again, with q changed in between) passes
// again to recount from the first round. The peers named are appended
// to sc.chosen too. Read lock.
func (s *State) choose(sc *scratch, ans *Answer, r *peer, q *request, withFull, again bool) {
	w := len(q.rem)
	cs, masks := sc.cands, sc.masks
	for round := 0; q.left > 0 && len(ans.Parents) < s.cfg.MaxParents; round++ {
		best, bestKey := -1, 0.0
		for i := range cs {
			c := &cs[i]
			if c.gain == 0 || (c.full && !withFull) || float64(c.gain)*c.score <= bestKey {
				continue
			}
			if round > 0 || again {
				c.gain = int32(q.gain(masks[i*w : (i+1)*w]))
			}
			if k := float64(c.gain) * c.score; c.gain > 0 && k > bestKey {
				best, bestKey = i, k
			}
		}
		if best < 0 {
			return
		}
		c := &cs[best]
		p := s.bySlot[c.slot]
		got := q.take(masks[best*w:(best+1)*w], make([]uint32, 0, c.gain))
		c.gain = 0
		ans.Parents = append(ans.Parents, Parent{ID: p.id, Addrs: p.info.Addrs, Chunks: got})
		sc.chosen = append(sc.chosen, p)
	}
}

// rest splits the chunks no parent was named for: later, those some
// candidate not named holds (to be asked about again), and unheld, those
// nobody may serve (origin coordination). Read lock.
func (s *State) rest(sc *scratch, q *request) (later, unheld []uint32) {
	w := len(q.rem)
	var held []uint64
	for i := range sc.cands {
		if sc.cands[i].gain == 0 {
			continue
		}
		if held == nil {
			held = make([]uint64, w)
		}
		m := sc.masks[i*w : (i+1)*w]
		for j := range held {
			held[j] |= m[j] & q.rem[j]
		}
	}
	for i, x := range q.rem {
		var h uint64
		if held != nil {
			h = held[i]
		}
		later = q.ordinals(i, x&h, later)
		unheld = q.ordinals(i, x&^h, unheld)
	}
	return later, unheld
}
