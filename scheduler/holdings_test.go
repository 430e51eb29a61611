package scheduler

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// held returns the chunks s records id as holding of blob.
func held(s *State, id string, blob [32]byte) []uint32 {
	p := s.peers[id]
	b := s.blobs[blob]
	if p == nil || b == nil {
		return nil
	}
	i, ok := p.holdings[b]
	if !ok {
		return nil
	}
	return b.row(&b.holders[i]).Ordinals(nil)
}

func TestHoldings(t *testing.T) {
	blob := digest("b")
	type op struct {
		kind   string // announce, full, drop
		chunks []uint32
	}
	tests := []struct {
		name string
		ops  []op
		want []uint32
	}{
		{"announce accumulates", []op{{"announce", []uint32{1, 2}}, {"announce", []uint32{2, 70}}}, []uint32{1, 2, 70}},
		{"full replaces", []op{{"announce", []uint32{1, 2, 300}}, {"full", []uint32{5}}}, []uint32{5}},
		{"full empty drops", []op{{"announce", []uint32{1}}, {"full", nil}}, nil},
		{"drop some", []op{{"announce", seq(0, 10)}, {"drop", []uint32{0, 9, 50}}}, seq(1, 9)},
		{"drop all", []op{{"announce", []uint32{3}}, {"drop", []uint32{3}}}, nil},
		{"drop unknown blob", []op{{"drop", []uint32{3}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil)
			mustRegister(t, s, "a", nil, t0)
			for _, o := range tt.ops {
				var err error
				switch o.kind {
				case "announce":
					_, err = s.Announce("a", blob, o.chunks, t0)
				case "full":
					_, err = s.AnnounceFull("a", blob, BitsetOf(o.chunks...), t0)
				case "drop":
					_, err = s.Drop("a", blob, o.chunks, t0)
				}
				if err != nil {
					t.Fatalf("%s: %v", o.kind, err)
				}
			}
			if got := held(s, "a", blob); !slices.Equal(got, tt.want) {
				t.Fatalf("holds %v, want %v", got, tt.want)
			}
			if tt.want == nil && s.Stats().Blobs != 0 {
				t.Fatal("empty blob state kept")
			}
			checkBudget(t, s)
		})
	}
}

// checkBudget fails if a peer's counted holding bytes differ from a
// recount.
func checkBudget(t *testing.T, s *State) {
	t.Helper()
	var total int64
	for _, p := range s.peers {
		var n int64
		for b, i := range p.holdings {
			n += holdingOverhead + 8*int64(b.holders[i].len)
		}
		if n != p.holdingBytes {
			t.Errorf("peer %s: holdingBytes %d, recount %d", p.id, p.holdingBytes, n)
		}
		total += p.holdingBytes
	}
	if total != s.holdingBytes {
		t.Errorf("holdingBytes of all peers %d, recount %d", s.holdingBytes, total)
	}
}

func TestAnnounceLimits(t *testing.T) {
	blob := digest("b")
	tests := []struct {
		name string
		edit func(*Config)
		do   func(s *State) error
		want error
	}{
		{"ordinal too high", nil, func(s *State) error {
			_, err := s.Announce("a", blob, []uint32{1 << 20}, t0)
			return err
		}, ErrInvalid},
		{"full ordinal too high", nil, func(s *State) error {
			_, err := s.AnnounceFull("a", blob, BitsetOf(1<<20), t0)
			return err
		}, ErrInvalid},
		{"full just below the limit", nil, func(s *State) error {
			_, err := s.AnnounceFull("a", blob, BitsetOf(1<<20-1), t0)
			return err
		}, nil},
		{"over the memory budget", func(c *Config) { c.MaxHoldingBytesPerPeer = 1024 }, func(s *State) error {
			_, err := s.Announce("a", blob, []uint32{10000}, t0)
			return err
		}, ErrLimit},
		{"many tiny blobs over the budget", func(c *Config) { c.MaxHoldingBytesPerPeer = 10 * (holdingOverhead + 8) }, func(s *State) error {
			for i := range 11 {
				if _, err := s.Announce("a", digest(string(rune('a'+i))), []uint32{0}, t0); err != nil {
					return err
				}
			}
			return nil
		}, ErrLimit},
		{"all peers over their budget together", func(c *Config) {
			c.MaxHoldingBytes = 10 * (holdingOverhead + 8)
			c.MaxHoldingBytesPerPeer = c.MaxHoldingBytes
		}, func(s *State) error {
			// Three peers, each within its own budget, announce four
			// blobs each: the eleventh holding is one too many.
			for _, id := range []string{"b", "c"} {
				if err := s.Register(id, PeerInfo{}, t0); err != nil {
					return err
				}
			}
			for i := range 4 {
				for j, id := range []string{"a", "b", "c"} {
					if _, err := s.Announce(id, digest(fmt.Sprint(i, j)), []uint32{0}, t0); err != nil {
						if n := 3*i + j; n != 10 {
							return fmt.Errorf("holding %d refused, want the eleventh: %w", n+1, err)
						}
						return err
					}
				}
			}
			return nil
		}, ErrLimit},
		{"unknown peer", nil, func(s *State) error {
			_, err := s.Announce("nobody", blob, []uint32{1}, t0)
			return err
		}, ErrUnknownPeer},
		{"banned peer", nil, func(s *State) error {
			s.Ban("a", t0)
			_, err := s.Announce("a", blob, []uint32{1}, t0)
			return err
		}, ErrBanned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, tt.edit)
			mustRegister(t, s, "a", nil, t0)
			err := tt.do(s)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			checkBudget(t, s)
		})
	}
}

// TestHoldingsBoundMemory: a peer announcing one chunk of each of many
// made-up blobs makes the scheduler keep a blob state per digest. What
// its budget lets it make the scheduler keep must stay near the budget:
// each holding is counted at what such a blob really costs. Not
// parallel: it measures the heap.
func TestHoldingsBoundMemory(t *testing.T) {
	const budget = 4 << 20
	s := newState(t, func(c *Config) { c.MaxHoldingBytesPerPeer = budget })
	mustRegister(t, s, "a", nil, t0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n := 0
	for ; n < budget/8; n++ {
		if _, err := s.Announce("a", digest(fmt.Sprint(n)), []uint32{0}, t0); err != nil {
			if !errors.Is(err, ErrLimit) {
				t.Fatal(err)
			}
			break
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(s)
	t.Logf("%d blobs accepted, heap grew %d bytes for a budget of %d", n, grew, budget)
	if limit := int64(budget) * 5 / 4; grew > limit {
		t.Errorf("%d one-chunk blobs took %d bytes of heap, want at most %d (the budget is %d)", n, grew, limit, budget)
	}
	checkBudget(t, s)
}
