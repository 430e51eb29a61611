package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"testing"
)

// choose is the plain greedy: each round names the candidate of the
// largest coverage × score of what is left, the first of equals, and its
// shortcuts (bounds, the shortlist) never change whom. Scores are drawn
// from a few values so that ties are common.
func TestChooseMatchesGreedy(t *testing.T) {
	rng := newRand(9)
	const peers = 40
	s := newState(t, nil)
	for i := range peers {
		mustRegister(t, s, fmt.Sprint("p", i), nil, t0)
	}
	for trial := range 3000 {
		s.cfg.MaxParents = 1 + rng.IntN(6)
		w := 1 + rng.IntN(3)
		var want []uint32
		for c := range uint32(w * 64) {
			if rng.IntN(3) > 0 {
				want = append(want, c)
			}
		}
		if len(want) == 0 {
			continue
		}
		var q request
		q.reset(want, nil)
		sc := &scratch{}
		n := 1 + rng.IntN(peers)
		for i := range n {
			m := make([]uint64, w)
			for j := range m {
				m[j] = q.rem[j] & rng.Uint64() & rng.Uint64()
			}
			g := q.gain(m)
			if g == 0 {
				continue
			}
			sc.masks = append(sc.masks, m...)
			score := []float64{0.5, 1, 1.5, 2, 3}[rng.IntN(5)]
			sc.cands = append(sc.cands, cand{slot: int32(i), gain: int32(g), full: rng.IntN(3) == 0, score: score})
		}
		cands := slices.Clone(sc.cands)

		// As Parents: non-full first, then all, after q changed (here:
		// some chunks taken away, as treeWait may).
		var got Answer
		s.choose(sc, &got, nil, &q, false, false)
		for j := range q.rem {
			x := q.rem[j] & rng.Uint64() & rng.Uint64() & rng.Uint64()
			q.rem[j] &^= x
			q.left -= bits.OnesCount64(x)
		}
		remAt := slices.Clone(q.rem)
		s.choose(sc, &got, nil, &q, true, true)

		var ref request
		ref.reset(want, nil)
		var wantIDs []string
		taken := make([]bool, len(cands))
		greedy := func(withFull bool) {
			for ref.left > 0 && len(wantIDs) < s.cfg.MaxParents {
				best, bestKey := -1, 0.0
				for i, c := range cands {
					if taken[i] || (c.full && !withFull) {
						continue
					}
					g := ref.gain(sc.masks[i*w : (i+1)*w])
					if k := float64(g) * c.score; g > 0 && k > bestKey {
						best, bestKey = i, k
					}
				}
				if best < 0 {
					return
				}
				taken[best] = true
				ref.take(sc.masks[best*w:(best+1)*w], nil)
				wantIDs = append(wantIDs, fmt.Sprint("p", cands[best].slot))
			}
		}
		greedy(false)
		for j := range ref.rem {
			x := ref.rem[j] &^ remAt[j] // what the first call left and was taken away
			ref.rem[j] &^= x
			ref.left -= bits.OnesCount64(x)
		}
		greedy(true)
		if gotIDs := parentIDs(got); !slices.Equal(gotIDs, wantIDs) {
			t.Fatalf("trial %d: parents %v, greedy %v", trial, gotIDs, wantIDs)
		}
		if !slices.Equal(q.rem, ref.rem) {
			t.Fatalf("trial %d: left %x, greedy %x", trial, q.rem, ref.rem)
		}
	}
}
