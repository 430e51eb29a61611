package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// treeScene registers holder "h" holding chunks 0..3 of blob "b" and
// requesters r0..r(n-1), all at t0.
func treeScene(t *testing.T, s *State, n int) []string {
	t.Helper()
	mustRegister(t, s, "h", nil, t0)
	mustAnnounce(t, s, "h", digest("b"), seq(0, 4), t0)
	var rs []string
	for i := range n {
		id := fmt.Sprintf("r%02d", i)
		mustRegister(t, s, id, nil, t0)
		rs = append(rs, id)
	}
	return rs
}

// treeWaitOf returns a's wait for future holders, if any: the one that
// names peers and is due within treeRetry.
func treeWaitOf(a Answer) (Wait, bool) {
	for _, w := range a.Wait {
		if len(w.Fetchers) > 0 && w.RetryAfter <= treeRetry {
			return w, true
		}
	}
	return Wait{}, false
}

// A parent serves at most TreeMaxChildren requesters at once; the rest wait
// for those requesters, who will hold the chunk.
func TestTreeCapRespected(t *testing.T) {
	maxChildren := Default().TreeMaxChildren
	tests := []struct {
		name       string
		requesters int
		wantWaits  int
	}{
		{"under the cap", maxChildren - 1, 0},
		{"at the cap", maxChildren, 0},
		{"over the cap", maxChildren + 5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil)
			rs := treeScene(t, s, tt.requesters)
			var served []string
			waits := 0
			for _, r := range rs {
				a := mustParents(t, s, r, digest("b"), seq(0, 4), t0)
				if slices.Equal(parentIDs(a), []string{"h"}) {
					served = append(served, r)
					continue
				}
				w, ok := treeWaitOf(a)
				if !ok || len(a.Parents) != 0 || !slices.Equal(w.Chunks, seq(0, 4)) {
					t.Fatalf("%s: %s, want h or a wait for all chunks", r, describe(a))
				}
				for _, f := range w.Fetchers {
					if !slices.Contains(served, f) {
						t.Errorf("%s told to wait for %s, not a future holder (%v)", r, f, served)
					}
				}
				if w.RetryAfter <= 0 || w.RetryAfter > s.Config().WaitRetry {
					t.Errorf("%s: RetryAfter %v", r, w.RetryAfter)
				}
				waits++
			}
			if waits != tt.wantWaits || len(served) != min(tt.requesters, s.cfg.TreeMaxChildren) {
				t.Errorf("%d served, %d waiting; want %d waiting", len(served), waits, tt.wantWaits)
			}
		})
	}
}

// When a future holder announces, the waiters get it as their parent,
// and the chunk's holders then form a tree: no parent is over the cap.
func TestTreeWaitersServedByFutureHolders(t *testing.T) {
	s := newState(t, nil)
	rs := treeScene(t, s, 3*s.cfg.TreeMaxChildren)
	b := digest("b")
	served := map[string]string{} // requester -> parent
	var waiting []string
	for _, r := range rs {
		a := mustParents(t, s, r, b, seq(0, 4), t0)
		if len(a.Parents) == 1 {
			served[r] = a.Parents[0].ID
		} else {
			waiting = append(waiting, r)
		}
	}
	if len(waiting) != 2*s.cfg.TreeMaxChildren {
		t.Fatalf("%d waiting, want %d", len(waiting), 2*s.cfg.TreeMaxChildren)
	}
	// The first children fetch and announce; h's leases are reported.
	now := at(500 * time.Millisecond)
	for r := range served {
		mustAnnounce(t, s, r, b, seq(0, 4), now)
		if _, err := s.Report(r, "h", Outcome{Blob: b, OK: true, Bytes: 4 << 20, Duration: time.Second}, now); err != nil {
			t.Fatal(err)
		}
	}
	children := map[string]int{}
	for _, r := range waiting {
		a := mustParents(t, s, r, b, seq(0, 4), now)
		if len(a.Parents) != 1 || len(a.Wait) != 0 {
			t.Fatalf("%s after the announcements: %s", r, describe(a))
		}
		children[a.Parents[0].ID]++
	}
	for p, n := range children {
		if n > s.cfg.TreeMaxChildren {
			t.Errorf("%s serves %d children, cap %d: %v", p, n, s.cfg.TreeMaxChildren, children)
		}
	}
	if len(children) < 2 {
		t.Errorf("waiters all went to one parent: %v", children)
	}
}

// Nobody waits for ever: a requester whose wait is older than TreeStarveAfter,
// or for whom no future holder is eligible, gets a full parent.
func TestTreeNoStarvation(t *testing.T) {
	b := digest("b")
	t.Run("waited too long", func(t *testing.T) {
		s := newState(t, nil)
		rs := treeScene(t, s, s.cfg.TreeMaxChildren+1)
		for _, r := range rs[:s.cfg.TreeMaxChildren] {
			mustParents(t, s, r, b, seq(0, 4), t0)
		}
		last := rs[s.cfg.TreeMaxChildren]
		for d := time.Duration(0); d < s.cfg.TreeStarveAfter; d += treeRetry {
			a := mustParents(t, s, last, b, seq(0, 4), at(d))
			if _, ok := treeWaitOf(a); !ok {
				t.Fatalf("at %v: %s, want a wait", d, describe(a))
			}
		}
		a := mustParents(t, s, last, b, seq(0, 4), at(s.cfg.TreeStarveAfter))
		if !slices.Equal(parentIDs(a), []string{"h"}) {
			t.Fatalf("after TreeStarveAfter: %s, want h", describe(a))
		}
		// Served, the wait is forgotten: a new query waits afresh.
		s.mu.RLock()
		n := len(s.peers[last].waits)
		s.mu.RUnlock()
		if n != 0 {
			t.Errorf("%d waits remembered after service", n)
		}
	})
	t.Run("no future holder of the chunk", func(t *testing.T) {
		s := newState(t, nil)
		rs := treeScene(t, s, s.cfg.TreeMaxChildren+1)
		// h is full with leases on chunk 0 only; chunk 3 has no future
		// holder.
		for _, r := range rs[:s.cfg.TreeMaxChildren] {
			mustParents(t, s, r, b, []uint32{0}, t0)
		}
		// Waits are all or none: the answer is not split between h and
		// a wait, which the peer would only act on after h's fetch.
		a := mustParents(t, s, rs[s.cfg.TreeMaxChildren], b, []uint32{0, 3}, t0)
		if !slices.Equal(parentIDs(a), []string{"h"}) || !slices.Equal(a.Parents[0].Chunks, []uint32{0, 3}) {
			t.Fatalf("%s, want h for 0 and 3", describe(a))
		}
	})
	t.Run("another parent named: due at once", func(t *testing.T) {
		s := newState(t, nil)
		rs := treeScene(t, s, s.cfg.TreeMaxChildren+1)
		mustRegister(t, s, "g", nil, t0)
		mustAnnounce(t, s, "g", b, []uint32{5}, t0)
		for _, r := range rs[:s.cfg.TreeMaxChildren] {
			mustParents(t, s, r, b, seq(0, 4), t0)
		}
		// Chunk 0 is asked about again as soon as g has served 5.
		a := mustParents(t, s, rs[s.cfg.TreeMaxChildren], b, []uint32{0, 5}, t0)
		if !slices.Equal(parentIDs(a), []string{"g"}) || len(a.Wait) != 1 || a.Wait[0].RetryAfter != 0 || len(a.Wait[0].Fetchers) == 0 {
			t.Fatalf("%s, want g for 5 and an immediate wait for 0", describe(a))
		}
	})
	t.Run("future holders that hold the chunks already", func(t *testing.T) {
		// x and y hold the chunks and each has a lease on the other that
		// it has not reported on (it announced before its report, or got
		// the chunks elsewhere): both are full, and neither will announce
		// anything new. A new requester is served over the cap at once,
		// not after TreeStarveAfter (seen with containerd pulling through
		// a fourth node while the registry was down: its fetch gave up
		// after 60 waits).
		s := newState(t, nil)
		for _, id := range []string{"x", "y", "d"} {
			mustRegister(t, s, id, nil, t0)
		}
		mustAnnounce(t, s, "x", b, seq(0, 4), t0)
		if a := mustParents(t, s, "y", b, seq(0, 4), t0); !slices.Equal(parentIDs(a), []string{"x"}) {
			t.Fatalf("y: %s, want x", describe(a))
		}
		mustAnnounce(t, s, "y", b, seq(0, 4), t0)
		if a := mustParents(t, s, "x", b, seq(0, 4), t0); !slices.Equal(parentIDs(a), []string{"y"}) {
			t.Fatalf("x: %s, want y", describe(a))
		}
		a := mustParents(t, s, "d", b, seq(0, 4), at(treeRetry))
		if len(a.Parents) != 1 || !slices.Equal(a.Parents[0].Chunks, seq(0, 4)) {
			t.Fatalf("d: %s, want x or y for every chunk", describe(a))
		}
	})
	t.Run("future holder left", func(t *testing.T) {
		s := newState(t, nil)
		rs := treeScene(t, s, s.cfg.TreeMaxChildren+1)
		for _, r := range rs[:s.cfg.TreeMaxChildren] {
			mustParents(t, s, r, b, seq(0, 4), t0)
		}
		// The future holders stop heartbeating; h and the last requester
		// stay.
		now := at(s.Config().PeerTTL + time.Second)
		for _, id := range []string{"h", rs[s.cfg.TreeMaxChildren]} {
			if err := s.Heartbeat(id, Load{}, at(s.Config().PeerTTL-time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		a := mustParents(t, s, rs[s.cfg.TreeMaxChildren], b, seq(0, 4), now)
		if !slices.Equal(parentIDs(a), []string{"h"}) {
			t.Fatalf("%s, want h", describe(a))
		}
	})
}

// A future holder counts only while its lease is outstanding: reported
// on or timed out, it no longer holds waiters back.
func TestTreeLeasesEnd(t *testing.T) {
	b := digest("b")
	tests := []struct {
		name  string
		swept bool // the ended leases are out of the blob's index
		end   func(t *testing.T, s *State, rs []string) time.Time
	}{
		{"timed out", false, func(t *testing.T, s *State, rs []string) time.Time {
			return at(s.Config().LeaseTimeout)
		}},
		{"timed out, swept", true, func(t *testing.T, s *State, rs []string) time.Time {
			now := at(s.Config().LeaseTimeout)
			s.Expire(now)
			return now
		}},
		{"reported", true, func(t *testing.T, s *State, rs []string) time.Time {
			for _, r := range rs[:s.cfg.TreeMaxChildren] {
				if _, err := s.Report(r, "h", Outcome{Blob: b}, at(time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			return at(time.Second)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.LeaseTimeout = 5 * time.Second })
			rs := treeScene(t, s, s.cfg.TreeMaxChildren+1)
			for _, r := range rs[:s.cfg.TreeMaxChildren] {
				mustParents(t, s, r, b, seq(0, 4), t0)
			}
			last := rs[s.cfg.TreeMaxChildren]
			if _, ok := treeWaitOf(mustParents(t, s, last, b, seq(0, 4), t0)); !ok {
				t.Fatal("no wait while the leases are outstanding")
			}
			now := tt.end(t, s, rs)
			a := mustParents(t, s, last, b, seq(0, 4), now)
			if !slices.Equal(parentIDs(a), []string{"h"}) {
				t.Fatalf("%s, want h", describe(a))
			}
			if !tt.swept {
				return
			}
			s.mu.RLock()
			defer s.mu.RUnlock()
			if bs := s.blobs[b]; bs.leased.len() != len(s.peers[last].leases) {
				t.Errorf("blob has %d leases, want %d", bs.leased.len(), len(s.peers[last].leases))
			}
		})
	}
}

// Leases keep their blob's state only as long as they last.
func TestTreeLeaseIndexForgotten(t *testing.T) {
	s := newState(t, nil)
	rs := treeScene(t, s, 2)
	b := digest("b")
	mustParents(t, s, rs[0], b, seq(0, 4), t0)
	if _, err := s.Drop("h", b, seq(0, 4), t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report(rs[0], "h", Outcome{Blob: b, OK: true}, t0); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Blobs != 0 {
		t.Errorf("%d blobs kept after the last lease ended", st.Blobs)
	}
}

// A waiter trails its future holders chunk by chunk: what they hold it
// gets from them at once, and it asks about the rest again when that is
// fetched, not over the cap.
func TestTreeWaiterTrailsFutureHolder(t *testing.T) {
	s := newState(t, nil)
	rs := treeScene(t, s, s.cfg.TreeMaxChildren+1)
	b := digest("b")
	for _, r := range rs[:s.cfg.TreeMaxChildren] {
		mustParents(t, s, r, b, seq(0, 4), t0)
	}
	last := rs[s.cfg.TreeMaxChildren]
	now := at(200 * time.Millisecond)
	mustAnnounce(t, s, rs[0], b, []uint32{0}, now)
	a := mustParents(t, s, last, b, seq(0, 4), now)
	if !slices.Equal(parentIDs(a), []string{rs[0]}) || !slices.Equal(a.Parents[0].Chunks, []uint32{0}) {
		t.Fatalf("%s, want %s for 0", describe(a), rs[0])
	}
	if len(a.Wait) != 1 || !slices.Equal(a.Wait[0].Chunks, seq(1, 4)) || a.Wait[0].RetryAfter != 0 {
		t.Fatalf("%s, want an immediate wait for 1..3", describe(a))
	}
}
