package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// requesters registers n requesters "r0".."r<n-1>" at t0.
func requesters(t *testing.T, s *State, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		mustRegister(t, s, id, nil, t0)
		ids = append(ids, id)
	}
	return ids
}

// With 8 requesters for a chunk nobody holds, at most M fetch from origin
// and the others wait for them.
func TestOriginFetchersBounded(t *testing.T) {
	for _, m := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("M=%d", m), func(t *testing.T) {
			s := newState(t, func(c *Config) { c.OriginFetchers = m })
			ids := requesters(t, s, 8)
			var fetchers, waiters []string
			for _, id := range ids {
				a := mustParents(t, s, id, digest("b"), []uint32{3}, t0)
				switch {
				case slices.Equal(a.Origin, []uint32{3}):
					fetchers = append(fetchers, id)
				case len(a.Wait) == 1:
					waiters = append(waiters, id)
					w := a.Wait[0]
					if len(w.Fetchers) != min(m, len(fetchers)) || w.RetryAfter <= 0 || w.RetryAfter > s.cfg.WaitRetry {
						t.Fatalf("%s: bad wait %s", id, describe(a))
					}
				default:
					t.Fatalf("%s: %s", id, describe(a))
				}
			}
			if !slices.Equal(fetchers, ids[:m]) {
				t.Fatalf("fetchers %v, want %v", fetchers, ids[:m])
			}
			// Asking again changes nothing for anyone.
			for _, id := range ids {
				a := mustParents(t, s, id, digest("b"), []uint32{3}, at(time.Second))
				if mine := len(a.Origin) > 0; mine != slices.Contains(fetchers, id) {
					t.Fatalf("second ask by %s: %s", id, describe(a))
				}
			}
			if v := s.OriginFetches(at(time.Second)); len(v) != 1 || len(v[0].Fetchers) != m || len(v[0].Waiters) != 8-m {
				t.Fatalf("admin view %+v", v)
			}
		})
	}
}

// Once the fetcher announces the chunk, waiters are woken and pointed at
// it (all of them: the relay tree, tested in tree_test.go, is kept out of
// the way with a cap above their number).
func TestOriginAnnounceDirectsWaiters(t *testing.T) {
	s := newState(t, func(c *Config) { c.TreeMaxChildren = 8 })
	ids := requesters(t, s, 4)
	for _, id := range ids {
		mustParents(t, s, id, digest("b"), []uint32{1, 2}, t0)
	}
	woken := mustAnnounce(t, s, "r0", digest("b"), []uint32{1, 2}, at(time.Second))
	if !slices.Equal(woken, ids[1:]) {
		t.Fatalf("woken %v, want %v", woken, ids[1:])
	}
	for _, id := range ids[1:] {
		a := mustParents(t, s, id, digest("b"), []uint32{1, 2}, at(time.Second))
		if len(a.Parents) != 1 || a.Parents[0].ID != "r0" || !slices.Equal(a.Parents[0].Chunks, []uint32{1, 2}) {
			t.Fatalf("%s not pointed at the fetcher: %s", id, describe(a))
		}
	}
	if v := s.OriginFetches(at(time.Second)); len(v) != 0 {
		t.Fatalf("fetches still in flight: %+v", v)
	}
}

// A fetcher that does not deliver in time loses its turn to the next peer
// that asks; one that gives up loses it at once.
func TestOriginTurnPassesOn(t *testing.T) {
	tests := []struct {
		name    string
		release func(t *testing.T, s *State) time.Time // returns when r1 asks again
		want    bool                                   // r1 gets the turn
		ranOut  uint64                                 // OriginTurnsRanOut after
	}{
		{"before the deadline", func(*testing.T, *State) time.Time { return at(29 * time.Second) }, false, 0},
		{"at the deadline", func(*testing.T, *State) time.Time { return at(30 * time.Second) }, true, 1},
		{"fetcher gives up", func(t *testing.T, s *State) time.Time {
			woken, err := s.AbandonOrigin("r0", digest("b"), []uint32{5}, at(time.Second))
			if err != nil || !slices.Equal(woken, []string{"r1", "r2"}) {
				t.Fatalf("abandon: woken %v, %v", woken, err)
			}
			return at(time.Second)
		}, true, 0},
		{"fetcher leaves", func(t *testing.T, s *State) time.Time { s.Unregister("r0"); return at(time.Second) }, true, 0},
		{"fetcher expires", func(t *testing.T, s *State) time.Time {
			for _, id := range []string{"r1", "r2"} {
				if err := s.Heartbeat(id, Load{}, at(20*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			s.Expire(at(31 * time.Second)) // r0 missed its heartbeats
			return at(31 * time.Second)
		}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.OriginTimeout = 30 * time.Second; c.PeerTTL = 30 * time.Second })
			requesters(t, s, 3)
			for _, id := range []string{"r0", "r1", "r2"} {
				mustParents(t, s, id, digest("b"), []uint32{5}, t0)
			}
			now := tt.release(t, s)
			a := mustParents(t, s, "r1", digest("b"), []uint32{5}, now)
			if got := slices.Equal(a.Origin, []uint32{5}); got != tt.want {
				t.Fatalf("r1 has the turn = %v, want %v: %s", got, tt.want, describe(a))
			}
			if tt.want {
				a = mustParents(t, s, "r2", digest("b"), []uint32{5}, now)
				if len(a.Wait) != 1 || !slices.Equal(a.Wait[0].Fetchers, []string{"r1"}) {
					t.Fatalf("r2 not told to wait for r1: %s", describe(a))
				}
			}
			if got := s.OriginTurnsRanOut(); got != tt.ranOut {
				t.Errorf("OriginTurnsRanOut = %d, want %d", got, tt.ranOut)
			}
		})
	}
}

// The retry time never outlasts the fetcher's deadline.
func TestOriginRetryAfter(t *testing.T) {
	s := newState(t, func(c *Config) { c.OriginTimeout = 3 * time.Second; c.WaitRetry = 2 * time.Second })
	requesters(t, s, 2)
	mustParents(t, s, "r0", digest("b"), []uint32{0}, t0)
	for _, tc := range []struct {
		now  time.Duration
		want time.Duration
	}{{0, 2 * time.Second}, {1500 * time.Millisecond, 1500 * time.Millisecond}, {2900 * time.Millisecond, 100 * time.Millisecond}} {
		a := mustParents(t, s, "r1", digest("b"), []uint32{0}, at(tc.now))
		if len(a.Wait) != 1 || a.Wait[0].RetryAfter != tc.want {
			t.Fatalf("at %v: %s, want retry after %v", tc.now, describe(a), tc.want)
		}
	}
}

// Expire forgets fetches whose turns all ran out.
func TestExpireSweepsOrigin(t *testing.T) {
	s := newState(t, func(c *Config) { c.OriginTimeout = time.Second })
	requesters(t, s, 1)
	mustParents(t, s, "r0", digest("b"), seq(0, 10), t0)
	if st := s.Stats(); st.OriginFetches != 10 {
		t.Fatalf("stats %+v", st)
	}
	s.Expire(at(time.Second))
	if st := s.Stats(); st.OriginFetches != 0 || st.Blobs != 0 {
		t.Fatalf("stats after expiry %+v", st)
	}
	if v := s.Peers(at(time.Second)); v[0].OriginTurns != 0 {
		t.Fatalf("turn count %d", v[0].OriginTurns)
	}
	if got := s.OriginTurnsRanOut(); got != 10 {
		t.Errorf("OriginTurnsRanOut = %d, want 10", got)
	}
}

// A banned peer may read: it fetches unheld chunks from origin itself,
// without taking a turn that others would wait on in vain.
func TestBannedRequesterTakesNoTurn(t *testing.T) {
	s := newState(t, nil)
	requesters(t, s, 2)
	s.Ban("r0", t0)
	if a := mustParents(t, s, "r0", digest("b"), []uint32{1}, t0); !slices.Equal(a.Origin, []uint32{1}) {
		t.Fatalf("banned requester: %s", describe(a))
	}
	if st := s.Stats(); st.Blobs != 0 || st.OriginFetches != 0 {
		t.Fatalf("state kept for a banned requester's fetch: %+v", st)
	}
	if a := mustParents(t, s, "r1", digest("b"), []uint32{1}, t0); !slices.Equal(a.Origin, []uint32{1}) {
		t.Fatalf("r1 made to wait for a banned peer: %s", describe(a))
	}
}

// A peer holds at most OriginTurnsPerPeer origin turns while another
// peer wants the same blob; the chunks past the bound are deferred
// (a short wait with no fetcher) and go to the next peer that asks. A
// peer alone with a blob takes every turn.
func TestOriginTurnsSpread(t *testing.T) {
	span := func(from, to uint32) []uint32 {
		var out []uint32
		for c := from; c <= to; c++ {
			out = append(out, c)
		}
		return out
	}
	deferred := func(t *testing.T, a Answer, chunks []uint32) {
		t.Helper()
		if len(a.Wait) != 1 || len(a.Wait[0].Fetchers) != 0 || !slices.Equal(a.Wait[0].Chunks, chunks) || a.Wait[0].RetryAfter != originDefer {
			t.Fatalf("want %v deferred: %s", chunks, describe(a))
		}
	}

	t.Run("alone", func(t *testing.T) {
		s := newState(t, func(c *Config) { c.OriginTurnsPerPeer = 4 })
		requesters(t, s, 2)
		if a := mustParents(t, s, "r0", digest("b"), span(0, 9), t0); !slices.Equal(a.Origin, span(0, 9)) {
			t.Fatalf("a lone peer was bounded: %s", describe(a))
		}
		// Another peer asking about another blob does not count.
		mustParents(t, s, "r1", digest("other"), []uint32{0}, t0)
		if a := mustParents(t, s, "r0", digest("b"), span(10, 15), t0); !slices.Equal(a.Origin, span(10, 15)) {
			t.Fatalf("bounded by interest in another blob: %s", describe(a))
		}
	})

	t.Run("shared", func(t *testing.T) {
		s := newState(t, func(c *Config) { c.OriginTurnsPerPeer = 4 })
		requesters(t, s, 3)
		b := digest("b")
		if a := mustParents(t, s, "r1", b, []uint32{0}, t0); !slices.Equal(a.Origin, []uint32{0}) {
			t.Fatalf("r1: %s", describe(a))
		}
		a := mustParents(t, s, "r0", b, span(1, 9), at(time.Millisecond))
		if !slices.Equal(a.Origin, span(1, 4)) {
			t.Fatalf("r0 took %v, want 1..4: %s", a.Origin, describe(a))
		}
		deferred(t, a, span(5, 9))
		// The next peer to ask takes the deferred turns, up to the bound
		// (r1 holds one already), and r0 waits for it.
		a = mustParents(t, s, "r1", b, span(5, 9), at(2*time.Millisecond))
		if !slices.Equal(a.Origin, span(5, 7)) {
			t.Fatalf("r1 took %v, want 5..7: %s", a.Origin, describe(a))
		}
		deferred(t, a, span(8, 9))
		a = mustParents(t, s, "r0", b, span(5, 9), at(3*time.Millisecond))
		if len(a.Origin) != 0 || len(a.Wait) != 2 {
			t.Fatalf("r0 again: %s", describe(a))
		}
		// Its own turns done, r0 takes the rest.
		mustAnnounce(t, s, "r0", b, span(1, 4), at(4*time.Millisecond))
		if a := mustParents(t, s, "r0", b, []uint32{8, 9}, at(5*time.Millisecond)); !slices.Equal(a.Origin, []uint32{8, 9}) {
			t.Fatalf("r0 after its turns: %s", describe(a))
		}
		// Interest lapses: once r1 has not asked for originInterest, r0 is
		// alone again.
		later := at(5*time.Millisecond + originInterest)
		if a := mustParents(t, s, "r0", b, span(20, 29), later); !slices.Equal(a.Origin, span(20, 29)) {
			t.Fatalf("r0 bounded after the others stopped asking: %s", describe(a))
		}
	})

	// Turns deferred for r0 that nobody took during the defer are r0's
	// when it asks again: a peer reading chunks nobody else wants is
	// held up by one defer, not by its own turns.
	t.Run("deferred, then taken", func(t *testing.T) {
		s := newState(t, func(c *Config) { c.OriginTurnsPerPeer = 4 })
		requesters(t, s, 3)
		b := digest("b")
		mustParents(t, s, "r1", b, []uint32{0}, t0)
		a := mustParents(t, s, "r0", b, span(1, 9), at(time.Millisecond))
		if !slices.Equal(a.Origin, span(1, 4)) {
			t.Fatalf("r0 took %v, want 1..4: %s", a.Origin, describe(a))
		}
		deferred(t, a, span(5, 9))
		// Before the defer is over, still deferred.
		deferred(t, mustParents(t, s, "r0", b, span(5, 9), at(time.Millisecond+originDefer/2)), span(5, 9))
		// After it, r0's, though it still holds 4 turns.
		a = mustParents(t, s, "r0", b, span(5, 9), at(time.Millisecond+originDefer))
		if !slices.Equal(a.Origin, span(5, 9)) || len(a.Wait) != 0 {
			t.Fatalf("r0 after the defer: %s, want 5..9 its own", describe(a))
		}
		// Others now wait for r0.
		a = mustParents(t, s, "r2", b, span(5, 9), at(2*time.Millisecond+originDefer))
		if len(a.Origin) != 0 || len(a.Wait) != 1 || !slices.Equal(a.Wait[0].Fetchers, []string{"r0"}) {
			t.Fatalf("r2: %s, want to wait for r0", describe(a))
		}
	})

	// With sizes in the queries, a peer past the count takes turns while
	// they add up to less than OriginTurnBytesPerPeer: many for small
	// chunks, the count for large ones, never more than the bytes allow
	// for a query that claims tiny chunks.
	t.Run("sized", func(t *testing.T) {
		s := newState(t, func(c *Config) { c.OriginTurnsPerPeer = 4; c.OriginTurnBytesPerPeer = 1 << 20 })
		requesters(t, s, 3)
		b := digest("b")
		sized := func(id string, chunks []uint32, bytes uint64, now time.Time) Answer {
			t.Helper()
			a, err := s.ParentsSized(id, b, chunks, bytes, now)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		mustParents(t, s, "r1", b, []uint32{0}, t0)
		a := sized("r0", span(1, 40), 40<<16, at(time.Millisecond)) // 64 KiB each
		if !slices.Equal(a.Origin, span(1, 16)) {
			t.Fatalf("r0 took %v, want 1..16 (1 MiB of 64 KiB chunks): %s", a.Origin, describe(a))
		}
		deferred(t, a, span(17, 40))
		a = sized("r2", span(100, 109), 10<<20, at(2*time.Millisecond)) // 1 MiB each
		if !slices.Equal(a.Origin, span(100, 103)) {
			t.Fatalf("r2 took %v, want 100..103 (the count): %s", a.Origin, describe(a))
		}
		mustAnnounce(t, s, "r0", b, span(1, 16), at(3*time.Millisecond))
		if p := s.peers["r0"]; p.fetching != 0 || p.fetchBytes != 0 {
			t.Fatalf("r0 after its turns: %d turns, %d bytes", p.fetching, p.fetchBytes)
		}
		a = sized("r0", span(200, 999), 800, at(4*time.Millisecond)) // 1 byte each, counted as minTurnBytes
		if want := span(200, 200+(1<<20)/minTurnBytes-1); !slices.Equal(a.Origin, want) {
			t.Fatalf("r0 took %d turns for tiny chunks, want %d", len(a.Origin), len(want))
		}
		// Without sizes the count alone bounds r1.
		a = mustParents(t, s, "r1", b, span(2000, 2009), at(5*time.Millisecond))
		if !slices.Equal(a.Origin, span(2000, 2002)) {
			t.Fatalf("r1 took %v unsized, want 2000..2002: %s", a.Origin, describe(a))
		}
	})

	t.Run("unbounded", func(t *testing.T) {
		s := newState(t, func(c *Config) { c.OriginTurnsPerPeer = 0 })
		requesters(t, s, 2)
		mustParents(t, s, "r1", digest("b"), []uint32{0}, t0)
		if a := mustParents(t, s, "r0", digest("b"), span(1, 9), t0); !slices.Equal(a.Origin, span(1, 9)) {
			t.Fatalf("bounded with OriginTurnsPerPeer 0: %s", describe(a))
		}
	})
}

// A peer that asks for a chunk it is listed as holding (its drop has not
// come yet, or its announcement crossed the query) fetches it without a
// turn: once its drop is in, nobody waits for it.
func TestHolderAskingTakesNoTurn(t *testing.T) {
	s := newState(t, func(c *Config) { c.OriginTimeout = 30 * time.Second })
	requesters(t, s, 3)
	mustAnnounce(t, s, "r0", digest("b"), []uint32{5}, t0)
	a := mustParents(t, s, "r0", digest("b"), []uint32{5, 6}, at(time.Second))
	if !slices.Equal(a.Origin, []uint32{5, 6}) {
		t.Fatalf("r0's answer: %s, want origin for both", describe(a))
	}
	if v := s.OriginFetches(at(time.Second)); len(v) != 1 || v[0].Chunk != 6 {
		t.Fatalf("origin fetches: %+v, want only chunk 6's (r0 does not hold it)", v)
	}
	// While r0 is listed, r1 is pointed at it.
	if a := mustParents(t, s, "r1", digest("b"), []uint32{5}, at(time.Second)); len(a.Parents) != 1 || a.Parents[0].ID != "r0" {
		t.Fatalf("r1's answer: %s, want r0 as its parent", describe(a))
	}
	// r0 lost the chunk: r2 takes the turn, not a wait for r0.
	if _, err := s.Drop("r0", digest("b"), []uint32{5}, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if a := mustParents(t, s, "r2", digest("b"), []uint32{5}, at(2*time.Second)); !slices.Equal(a.Origin, []uint32{5}) {
		t.Fatalf("r2's answer after r0's drop: %s, want its own turn", describe(a))
	}
}

// A fetcher that drops a chunk it holds the turn for (its announcement
// and drop coalesced into the drop alone) gives the turn up: the waiters
// are returned, and the next to ask takes it. A drop by another peer
// leaves the turn alone.
func TestDropEndsDroppersTurn(t *testing.T) {
	s := newState(t, func(c *Config) { c.OriginTimeout = 30 * time.Second })
	requesters(t, s, 3)
	mustParents(t, s, "r0", digest("b"), []uint32{5, 6}, t0)
	mustParents(t, s, "r1", digest("b"), []uint32{5, 6}, t0)
	woken, err := s.Drop("r2", digest("b"), []uint32{5}, at(time.Second))
	if err != nil || woken != nil {
		t.Fatalf("another peer's drop: woken %v, %v; want none", woken, err)
	}
	woken, err = s.Drop("r0", digest("b"), []uint32{5}, at(time.Second))
	if err != nil || !slices.Equal(woken, []string{"r1"}) {
		t.Fatalf("fetcher's drop: woken %v, %v; want [r1]", woken, err)
	}
	a := mustParents(t, s, "r1", digest("b"), []uint32{5, 6}, at(time.Second))
	if !slices.Equal(a.Origin, []uint32{5}) || len(a.Wait) != 1 || !slices.Equal(a.Wait[0].Fetchers, []string{"r0"}) {
		t.Fatalf("r1 after r0's drop: %s, want the turn for 5 and a wait for r0's 6", describe(a))
	}
	if v := s.Peers(at(time.Second)); v[0].OriginTurns != 1 {
		t.Errorf("r0 holds %d turns, want 1", v[0].OriginTurns)
	}
}
