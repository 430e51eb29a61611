package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// sampleScene registers "r" (zone z0, rack k0, host h0) and n holders of
// chunks 0..63 of blob "b", spread over 3 zones of 10 racks, one host
// each except "twin", on r's host.
func sampleScene(t *testing.T, s *State, n int) {
	t.Helper()
	mustRegister(t, s, "r", labels("z0", "k0", "h0"), t0)
	mustRegister(t, s, "twin", labels("z0", "k0", "h0"), t0)
	mustAnnounce(t, s, "twin", digest("b"), seq(0, 64), t0)
	for i := range n - 1 {
		id := fmt.Sprint("p", i)
		mustRegister(t, s, id, labels(fmt.Sprint("z", i%3), fmt.Sprint("k", i%30), fmt.Sprint("host", i)), t0)
		mustAnnounce(t, s, id, digest("b"), seq(0, 64), t0)
	}
}

// A query looks at every holder on the requester's host and at most
// ParentSample in each other tier, and still names the host's first.
func TestSampleBoundsCandidates(t *testing.T) {
	const n, limit = 600, 8
	s := newState(t, func(c *Config) { c.ParentSample = limit; c.TreeMaxChildren = 1000 })
	sampleScene(t, s, n)
	r := s.peers["r"]
	b := s.blobs[digest("b")]
	firsts := map[int32]bool{}
	for i := range 50 {
		sc := new(scratch)
		var q request
		q.reset(seq(0, 64), nil)
		s.candidates(sc, b, r, &q, at(time.Duration(i)))
		tiers := map[int]int{}
		host := false
		for _, c := range sc.cands {
			tiers[tierOf(locality(&s.hot[r.slot], &s.hot[c.slot]))]++
			host = host || s.bySlot[c.slot].id == "twin"
		}
		if !host || tiers[tierHost] != 1 {
			t.Fatalf("query %d: the holder on r's host not among the candidates (%v)", i, tiers)
		}
		for _, tier := range []int{tierRack, tierZone, tierElsewhere} {
			if tiers[tier] != limit {
				t.Fatalf("query %d: %d candidates in tier %d, want %d (%v)", i, tiers[tier], tier, limit, tiers)
			}
		}
		firsts[sc.cands[0].slot] = true
		a := mustParents(t, s, "r", digest("b"), seq(0, 64), at(time.Duration(i)))
		if got := parentIDs(a); len(got) != 1 || got[0] != "twin" {
			t.Fatalf("query %d: parents %v, want [twin]", i, got)
		}
		// Served: the assignment stops counting as twin's load.
		if _, err := s.Report("r", "twin", Outcome{Blob: digest("b"), OK: true, Bytes: 1 << 20, Duration: 40 * time.Millisecond}, at(time.Duration(i))); err != nil {
			t.Fatal(err)
		}
	}
	if len(firsts) < 20 {
		t.Errorf("50 queries started their visit at %d holders; want a random start", len(firsts))
	}
}

// Sampling never sends to origin a chunk some eligible holder has: a
// holder outside the sample is taken when it holds a chunk no sampled
// one does.
func TestSampleNeverHidesAChunk(t *testing.T) {
	for seed := range uint64(20) {
		rng := newRand(seed)
		s := newState(t, func(c *Config) {
			c.ParentSample = 1 + rng.IntN(8)
			c.MaxParents = 64
			c.TreeMaxChildren = 1000
			c.Jitter = 0.1
		})
		const n, common, rare = 400, 100, 30
		mustRegister(t, s, "r", labels("z0", "k0", "h0"), t0)
		rareAt := map[int][]uint32{}
		for c := range uint32(rare) {
			i := rng.IntN(n)
			rareAt[i] = append(rareAt[i], common+c)
		}
		for i := range n {
			id := fmt.Sprint("p", i)
			mustRegister(t, s, id, labels(fmt.Sprint("z", i%3), fmt.Sprint("k", i%30), ""), t0)
			mustAnnounce(t, s, id, digest("b"), append(seq(0, common), rareAt[i]...), t0)
		}
		ask := seq(0, common+rare+5) // the last 5 nobody holds
		for i := range 5 {
			a := mustParents(t, s, "r", digest("b"), ask, at(time.Duration(i)))
			if want := seq(common+rare, common+rare+5); !slices.Equal(a.Origin, want) {
				t.Fatalf("seed %d, query %d: origin %v, want %v: %s", seed, i, a.Origin, want, describe(a))
			}
			for _, p := range a.Parents {
				for _, c := range p.Chunks {
					if !slices.Contains(held(s, p.ID, digest("b")), c) {
						t.Fatalf("seed %d: %s assigned unheld chunk %d", seed, p.ID, c)
					}
				}
			}
		}
	}
}
