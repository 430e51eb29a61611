package scheduler

import (
	"testing"
	"time"
)

func TestAdminViews(t *testing.T) {
	s := newState(t, nil)
	mustRegister(t, s, "b", labels("z", "k", "h2"), t0)
	mustRegister(t, s, "a", labels("z", "k", "h1"), t0)
	mustAnnounce(t, s, "a", digest("x"), seq(0, 10), t0)
	mustAnnounce(t, s, "b", digest("x"), seq(5, 15), t0)
	mustParents(t, s, "b", digest("x"), []uint32{0, 20}, t0) // 0 from a, 20 from origin
	s.Ban("c", t0)

	ps := s.Peers(at(time.Second))
	if len(ps) != 2 || ps[0].ID != "a" || ps[1].ID != "b" {
		t.Fatalf("peers %+v", ps)
	}
	if ps[0].Chunks != 10 || ps[0].Blobs != 1 || ps[0].Pending != 1 || !ps[0].Alive || ps[0].Labels[LabelHost] != "h1" {
		t.Fatalf("peer a %+v", ps[0])
	}
	if ps[1].OriginTurns != 1 {
		t.Fatalf("peer b %+v", ps[1])
	}
	bs := s.Blobs()
	if len(bs) != 1 || bs[0].Holders != 2 || bs[0].Chunks != 15 || bs[0].Copies != 20 || bs[0].OriginFetch != 1 {
		t.Fatalf("blobs %+v", bs)
	}
	of := s.OriginFetches(t0)
	if len(of) != 1 || of[0].Chunk != 20 || of[0].Fetchers[0].Peer != "b" || !of[0].Fetchers[0].Deadline.Equal(at(s.cfg.OriginTimeout)) {
		t.Fatalf("origin fetches %+v", of)
	}
	bans := s.Bans(t0)
	if len(bans) != 1 || bans[0].Peer != "c" || bans[0].Accusers[0] != "operator" {
		t.Fatalf("bans %+v", bans)
	}
	s.Unban("c")
	if len(s.Bans(t0)) != 0 {
		t.Fatal("unban kept the ban")
	}
	if st := s.Stats(); st != (Stats{Peers: 2, Blobs: 1, Holdings: 2, OriginFetches: 1, Leases: 1}) {
		t.Fatalf("stats %+v", st)
	}
	// Views are copies.
	ps[0].Labels[LabelHost] = "changed"
	if s.Peers(t0)[0].Labels[LabelHost] != "h1" {
		t.Fatal("view shares the state's map")
	}
}
