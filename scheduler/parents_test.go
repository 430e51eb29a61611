package scheduler

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// holding is one peer's labels and chunks, for building a scene.
type holding struct {
	id     string
	labels map[string]string
	chunks []uint32
}

// scene registers the requester "r" (with rl) and the holders of blob.
func scene(t *testing.T, s *State, rl map[string]string, hs []holding) {
	t.Helper()
	mustRegister(t, s, "r", rl, t0)
	for _, h := range hs {
		mustRegister(t, s, h.id, h.labels, t0)
		if len(h.chunks) > 0 {
			mustAnnounce(t, s, h.id, digest("b"), h.chunks, t0)
		}
	}
}

func TestParentsCoverage(t *testing.T) {
	tests := []struct {
		name       string
		maxParents int
		holders    []holding
		ask        []uint32
		wantIDs    []string // parents in order; nil: not checked
		wantOrigin []uint32
		wantLater  []uint32
	}{
		{"one holder has all", 4, []holding{{"a", nil, seq(0, 10)}}, seq(0, 10), []string{"a"}, nil, nil},
		{"halves", 4, []holding{{"a", nil, seq(0, 5)}, {"b", nil, seq(5, 10)}}, seq(0, 10), nil, nil, nil},
		{"greedy takes the widest first", 4, []holding{
			{"a", nil, seq(0, 3)}, {"b", nil, seq(0, 8)}, {"c", nil, seq(6, 10)},
		}, seq(0, 10), []string{"b", "c"}, nil, nil},
		{"unheld chunk goes to origin", 4, []holding{{"a", nil, seq(0, 5)}}, seq(0, 7), []string{"a"}, []uint32{5, 6}, nil},
		{"nothing held", 4, nil, []uint32{3, 1, 2}, nil, []uint32{1, 2, 3}, nil},
		{"beyond max parents: ask again", 2, []holding{
			{"a", nil, seq(0, 4)}, {"b", nil, seq(4, 7)}, {"c", nil, seq(7, 9)}, {"d", nil, []uint32{9}},
		}, seq(0, 11), []string{"a", "b"}, []uint32{10}, []uint32{7, 8, 9}},
		{"the requester's own holding is ignored", 4, []holding{{"a", nil, []uint32{1}}}, []uint32{0, 1}, []string{"a"}, []uint32{0}, nil},
		{"scattered chunks (sparse shape)", 4, []holding{
			{"a", nil, []uint32{0, 500000}}, {"b", nil, []uint32{100000}},
		}, []uint32{500000, 0, 100000, 900000}, []string{"a", "b"}, []uint32{900000}, nil},
		{"unsorted with repeats", 4, []holding{{"a", nil, seq(0, 3)}}, []uint32{2, 0, 2, 1, 0}, []string{"a"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.MaxParents = tt.maxParents })
			scene(t, s, nil, tt.holders)
			mustAnnounce(t, s, "r", digest("b"), []uint32{0}, t0) // "r" holds 0; it must not matter
			if _, err := s.Drop("r", digest("b"), []uint32{0}, t0); err != nil {
				t.Fatal(err)
			}
			a := mustParents(t, s, "r", digest("b"), tt.ask, t0)
			if tt.wantIDs != nil && !slices.Equal(parentIDs(a), tt.wantIDs) {
				t.Errorf("parents %v, want %v: %s", parentIDs(a), tt.wantIDs, describe(a))
			}
			if !slices.Equal(a.Origin, tt.wantOrigin) {
				t.Errorf("origin %v, want %v", a.Origin, tt.wantOrigin)
			}
			var later []uint32
			for _, w := range a.Wait {
				if len(w.Fetchers) == 0 {
					later = append(later, w.Chunks...)
					if w.RetryAfter != 0 {
						t.Errorf("held-elsewhere wait has RetryAfter %v", w.RetryAfter)
					}
				}
			}
			if !slices.Equal(later, tt.wantLater) {
				t.Errorf("later %v, want %v", later, tt.wantLater)
			}
			// Every parent holds what it is assigned.
			for _, p := range a.Parents {
				for _, c := range p.Chunks {
					if !slices.Contains(held(s, p.ID, digest("b")), c) {
						t.Errorf("parent %s assigned chunk %d it does not hold", p.ID, c)
					}
				}
			}
		})
	}
}

func TestRequesterNeverItsOwnParent(t *testing.T) {
	s := newState(t, nil)
	scene(t, s, labels("z", "k", "h"), []holding{{"a", nil, seq(0, 4)}})
	mustAnnounce(t, s, "r", digest("b"), seq(0, 8), t0) // best placed holder of all
	for i := range 20 {
		a := mustParents(t, s, "r", digest("b"), seq(0, 8), at(time.Duration(i)*time.Millisecond))
		if slices.Contains(parentIDs(a), "r") {
			t.Fatalf("requester named as its own parent: %s", describe(a))
		}
	}
}

func TestLocalityPreference(t *testing.T) {
	r := labels("z1", "k1", "h1")
	tests := []struct {
		name    string
		holders []holding
		want    string
	}{
		{"host beats rack", []holding{{"rack", labels("z1", "k1", "h2"), nil}, {"host", labels("z1", "k1", "h1"), nil}}, "host"},
		{"rack beats zone", []holding{{"zone", labels("z1", "k2", "h3"), nil}, {"rack", labels("z1", "k1", "h2"), nil}}, "rack"},
		{"zone beats remote", []holding{{"far", labels("z2", "k9", "h9"), nil}, {"zone", labels("z1", "k2", "h3"), nil}}, "zone"},
		{"same rack name in another zone is remote", []holding{{"other", labels("z2", "k1", "h4"), nil}, {"zone", labels("z1", "k5", "h5"), nil}}, "zone"},
		{"unlabelled is remote", []holding{{"bare", nil, nil}, {"zone", labels("z1", "", ""), nil}}, "zone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil)
			for i := range tt.holders {
				tt.holders[i].chunks = []uint32{7}
			}
			scene(t, s, r, tt.holders)
			a := mustParents(t, s, "r", digest("b"), []uint32{7}, t0)
			if got := parentIDs(a); len(got) != 1 || got[0] != tt.want {
				t.Fatalf("parents %v, want [%s]", got, tt.want)
			}
		})
	}
}

// Equal holders share the load: assignments count as load until
// reported, and jitter breaks ties, so many requesters spread evenly.
func TestLoadSpreadsAcrossEqualPeers(t *testing.T) {
	const holders, queries = 10, 2000
	tests := []struct {
		name   string
		report bool // requesters report each assignment at once
		jitter float64
		slack  float64 // allowed deviation from the mean share
	}{
		{"assignments outstanding", false, 0, 0.02},
		{"assignments outstanding, jitter", false, 0.1, 0.1},
		{"reported at once, jitter", true, 0.1, 0.35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.Jitter = tt.jitter; c.MaxLeasesPerPeer = queries })
			var hs []holding
			for i := range holders {
				hs = append(hs, holding{fmt.Sprintf("h%d", i), nil, []uint32{0}})
			}
			scene(t, s, nil, hs)
			count := map[string]int{}
			for i := range queries {
				now := at(time.Duration(i) * time.Microsecond)
				a := mustParents(t, s, "r", digest("b"), []uint32{0}, now)
				if len(a.Parents) != 1 {
					t.Fatalf("query %d: %s", i, describe(a))
				}
				id := a.Parents[0].ID
				count[id]++
				if tt.report {
					if _, err := s.Report("r", id, Outcome{Blob: digest("b"), OK: true}, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			mean := float64(queries) / holders
			for id, n := range count {
				if math.Abs(float64(n)-mean) > tt.slack*mean {
					t.Errorf("%s got %d, mean %.0f: %v", id, n, mean, count)
				}
			}
			if len(count) != holders {
				t.Errorf("only %d of %d holders used: %v", len(count), holders, count)
			}
		})
	}
}

// A peer reporting heavy load or low capacity headroom ranks lower but is
// still named when it is the only holder.
func TestLoadLowersRankNeverExcludes(t *testing.T) {
	s := newState(t, nil)
	scene(t, s, nil, []holding{{"busy", nil, []uint32{0, 1}}, {"idle", nil, []uint32{0}}})
	if err := s.Register("busy", PeerInfo{UploadCapacity: 100}, t0); err != nil {
		t.Fatal(err)
	}
	mustAnnounce(t, s, "busy", digest("b"), []uint32{0, 1}, t0)
	if err := s.Heartbeat("busy", Load{ActiveUploads: 50, UploadBytesPerSec: 100}, t0); err != nil {
		t.Fatal(err)
	}
	a := mustParents(t, s, "r", digest("b"), []uint32{0}, t0)
	if got := parentIDs(a); !slices.Equal(got, []string{"idle"}) {
		t.Fatalf("parents %v, want [idle]", got)
	}
	a = mustParents(t, s, "r", digest("b"), []uint32{1}, t0)
	if got := parentIDs(a); !slices.Equal(got, []string{"busy"}) {
		t.Fatalf("sole holder not named: %s", describe(a))
	}
}

func TestParentsInvalid(t *testing.T) {
	s := newState(t, nil)
	mustRegister(t, s, "r", nil, t0)
	tests := []struct {
		name   string
		id     string
		chunks []uint32
		want   error
	}{
		{"no chunks", "r", nil, ErrInvalid},
		{"too many chunks", "r", make([]uint32, 1025), ErrInvalid},
		{"ordinal too high", "r", []uint32{1 << 20}, ErrInvalid},
		{"unknown requester", "x", []uint32{1}, ErrUnknownPeer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Parents(tt.id, digest("b"), tt.chunks, t0); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// Random scenes: whatever the holdings, every chunk is placed once,
// parents hold what they serve, and a chunk goes to origin or waits only
// if no eligible peer holds it.
func TestParentsRandomScenes(t *testing.T) {
	for seed := range uint64(50) {
		rng := newRand(seed)
		// Every third scene samples its holders (candidates).
		sample := []int{0, 32, 1 + rng.IntN(4)}[seed%3]
		s := newState(t, func(c *Config) { c.Jitter = 0.1; c.ParentSample = sample })
		nPeers := 1 + rng.IntN(30)
		chunks := uint32(1 + rng.IntN(300))
		mustRegister(t, s, "r", nil, t0)
		all := map[uint32]bool{}
		for i := range nPeers {
			id := fmt.Sprintf("p%d", i)
			mustRegister(t, s, id, labels(fmt.Sprint(rng.IntN(3)), fmt.Sprint(rng.IntN(3)), ""), t0)
			var cs []uint32
			for c := range chunks {
				if rng.IntN(10) < 2 {
					cs = append(cs, c)
					all[c] = true
				}
			}
			if len(cs) > 0 {
				mustAnnounce(t, s, id, digest("b"), cs, t0)
			}
		}
		var ask []uint32
		for range 1 + rng.IntN(100) {
			ask = append(ask, uint32(rng.IntN(int(chunks))))
		}
		a := mustParents(t, s, "r", digest("b"), ask, t0)
		for _, p := range a.Parents {
			for _, c := range p.Chunks {
				if !slices.Contains(held(s, p.ID, digest("b")), c) {
					t.Fatalf("seed %d: %s assigned unheld chunk %d", seed, p.ID, c)
				}
			}
		}
		for _, c := range a.Origin {
			if all[c] {
				t.Fatalf("seed %d: chunk %d sent to origin though held", seed, c)
			}
		}
		if len(a.Parents) > 4 {
			t.Fatalf("seed %d: %d parents", seed, len(a.Parents))
		}
	}
}

// The same calls give the same answers: the jitter comes only from the
// injected source.
func TestParentsDeterministic(t *testing.T) {
	run := func() string {
		s := newState(t, func(c *Config) { c.Jitter = 0.5 })
		var hs []holding
		for i := range 20 {
			hs = append(hs, holding{fmt.Sprint("h", i), nil, seq(uint32(i), uint32(i+30))})
		}
		scene(t, s, nil, hs)
		out := ""
		for i := range 50 {
			out += describe(mustParents(t, s, "r", digest("b"), seq(uint32(i), uint32(i+10)), at(time.Duration(i))))
		}
		return out
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("answers differ:\n%s\n%s", a, b)
	}
}

// A query on a blob nobody holds sends every chunk through origin
// coordination, whatever the query before it (whose working space the
// State reuses) found.
func TestParentsUnknownBlobAfterAnother(t *testing.T) {
	s := newState(t, func(c *Config) { c.MaxParents = 1 })
	scene(t, s, nil, []holding{{"a", nil, seq(0, 4)}, {"b", nil, seq(4, 8)}})
	a := mustParents(t, s, "r", digest("b"), seq(0, 8), t0)
	if len(a.Parents) != 1 || len(a.Wait) != 1 {
		t.Fatalf("%s, want one parent and a wait for the other's chunks", describe(a))
	}
	a = mustParents(t, s, "r", digest("unknown"), seq(0, 8), t0)
	if len(a.Parents) != 0 || !slices.Equal(a.Origin, seq(0, 8)) || len(a.Wait) != 0 {
		t.Errorf("unknown blob: %s, want origin for all", describe(a))
	}
}
