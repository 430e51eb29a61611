package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// Random announcements, replacements, drops and departures against a
// model: the State must hold exactly the model's sets, and every blob's
// slab must stay consistent (rows disjoint, dead words counted).
func TestHoldingsAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := newRand(seed)
			s := newState(t, nil)
			peers := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
			blobs := []string{"x", "y", "z"}
			model := map[string]map[string]map[uint32]bool{} // peer -> blob -> chunks
			for _, p := range peers {
				mustRegister(t, s, p, nil, t0)
				model[p] = map[string]map[uint32]bool{}
			}
			randChunks := func() []uint32 {
				hi := []int{64, 300, 5000, 200000}[rng.IntN(4)]
				var cs []uint32
				for range 1 + rng.IntN(20) {
					cs = append(cs, uint32(rng.IntN(hi)))
				}
				return cs
			}
			for step := range 3000 {
				p := peers[rng.IntN(len(peers))]
				bl := blobs[rng.IntN(len(blobs))]
				set := model[p][bl]
				if set == nil {
					set = map[uint32]bool{}
					model[p][bl] = set
				}
				switch op := rng.IntN(10); {
				case op < 5:
					cs := randChunks()
					mustAnnounce(t, s, p, digest(bl), cs, t0)
					for _, c := range cs {
						set[c] = true
					}
				case op < 7:
					cs := randChunks()
					if rng.IntN(4) == 0 {
						cs = nil
					}
					if _, err := s.AnnounceFull(p, digest(bl), BitsetOf(cs...), t0); err != nil {
						t.Fatal(err)
					}
					clear(set)
					for _, c := range cs {
						set[c] = true
					}
				case op < 9:
					cs := slices.Collect(maps.Keys(set))
					cs = append(cs, randChunks()...)
					cs = cs[:rng.IntN(len(cs)+1)]
					if _, err := s.Drop(p, digest(bl), cs, t0); err != nil {
						t.Fatal(err)
					}
					for _, c := range cs {
						delete(set, c)
					}
				default:
					s.Unregister(p)
					mustRegister(t, s, p, nil, t0.Add(time.Duration(step)))
					model[p] = map[string]map[uint32]bool{}
				}
				checkSlabs(t, s)
			}
			for _, p := range peers {
				for _, bl := range blobs {
					want := slices.Sorted(maps.Keys(model[p][bl]))
					if got := held(s, p, digest(bl)); !slices.Equal(got, want) {
						t.Fatalf("%s holds %v of %s, model %v", p, got, bl, want)
					}
				}
			}
			checkBudget(t, s)
		})
	}
}

// checkSlabs fails unless every blob's rows are disjoint, within its slab,
// counted (n) right, indexed from their peers, and live + dead words make
// up the slab.
func checkSlabs(t *testing.T, s *State) {
	t.Helper()
	for d, b := range s.blobs {
		if len(b.holders) == 0 && len(b.origin) == 0 {
			t.Fatalf("empty blob %x kept", d[:4])
		}
		used := make([]bool, len(b.slab.words))
		live := 0
		for i := range b.holders {
			h := &b.holders[i]
			p := s.bySlot[h.slot]
			if p == nil || p.holdings[b] != int32(i) {
				t.Fatalf("holder %d of %x not indexed from its peer", i, d[:4])
			}
			if int(h.off)+int(h.len) > len(b.slab.words) {
				t.Fatalf("row %d..%d beyond slab of %d", h.off, h.off+h.len, len(b.slab.words))
			}
			for w := h.off; w < h.off+h.len; w++ {
				if used[w] {
					t.Fatalf("rows overlap at word %d", w)
				}
				used[w] = true
			}
			live += int(h.len)
			if n := b.row(h).Count(); n != int(h.n) || n == 0 {
				t.Fatalf("holder of %s counts %d, row has %d", p.id, h.n, n)
			}
		}
		if live+b.slab.dead != len(b.slab.words) {
			t.Fatalf("live %d + dead %d != slab %d", live, b.slab.dead, len(b.slab.words))
		}
	}
}
