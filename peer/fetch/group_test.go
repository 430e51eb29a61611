package fetch

import (
	"slices"
	"sync"
	"testing"

	"damselfly/rafs"
)

// Turns an answer grants for chunks the group no longer waits for go back
// at once when their flights are done (the chunk came another way, or
// failed), and are left to the announcement when the chunk is still
// being kept; pending chunks and chunks of no flight of the group are
// not touched.
func TestStrayTurnsGivenBack(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var abandoned []uint32
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := &Engine{router: abandonRouter{mu: &mu, abandoned: &abandoned}, m: m}
	fs, _, _, _ := n.flights.Join(t.Context(), flightKey{off: 1}, flightKey{off: 2}, flightKey{off: 3})
	done, keeping, pending := fs[0], fs[1], fs[2]
	n.flights.Finish(done, fetched{}, nil)
	n.flights.Resolve(keeping, fetched{}, nil)
	g := &group{blob: rafs.Digest{1}, all: map[uint32]*chunkFlight{1: done, 2: keeping, 3: pending}, pending: map[uint32]wanted{3: {f: pending}}}
	n.strayTurns(g, []uint32{1, 2, 3, 4})
	mu.Lock()
	got := slices.Clone(abandoned)
	mu.Unlock()
	if !slices.Equal(got, []uint32{1}) {
		t.Errorf("abandoned %v, want [1]", got)
	}
	if s := n.m.Stats(); s.StrayTurns != 1 {
		t.Errorf("StrayTurns = %d, want 1", s.StrayTurns)
	}
}

// abandonRouter records Abandons.
type abandonRouter struct {
	NoRouter
	mu        *sync.Mutex
	abandoned *[]uint32
}

func (r abandonRouter) Abandon(blob rafs.Digest, chunks []uint32) {
	r.mu.Lock()
	*r.abandoned = append(*r.abandoned, chunks...)
	r.mu.Unlock()
}
