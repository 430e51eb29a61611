package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRegisterRejectsBadInfo(t *testing.T) {
	long := strings.Repeat("x", MaxStringLen+1)
	tests := []struct {
		name string
		id   string
		info PeerInfo
	}{
		{"empty ID", "", PeerInfo{}},
		{"long ID", long, PeerInfo{}},
		{"too many addrs", "a", PeerInfo{Addrs: make([]string, MaxAddrs+1)}},
		{"long addr", "a", PeerInfo{Addrs: []string{long}}},
		{"long label", "a", PeerInfo{Labels: map[string]string{"zone": long}}},
		{"negative capacity", "a", PeerInfo{UploadCapacity: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil)
			if err := s.Register(tt.id, tt.info, t0); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if len(s.Peers(t0)) != 0 {
				t.Fatal("peer registered")
			}
		})
	}
}

// A peer that misses heartbeats for the TTL is never named again, even
// before Expire runs, and Expire drops it with all its holdings.
func TestExpiryDropsHoldings(t *testing.T) {
	blob := digest("b")
	tests := []struct {
		name      string
		heartbeat time.Duration // when "a" last beat (< 0: never after registering)
		ask       time.Duration // when "r" asks
		wantA     bool          // "a" still offered
	}{
		{"fresh", -1, 10 * time.Second, true},
		{"heartbeat keeps it", 20 * time.Second, 45 * time.Second, true},
		{"exactly at TTL", -1, 30 * time.Second, true},
		{"past TTL", -1, 31 * time.Second, false},
		{"past TTL after heartbeat", 20 * time.Second, 51 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil) // PeerTTL 30 s
			mustRegister(t, s, "a", nil, t0)
			mustRegister(t, s, "r", nil, t0)
			mustAnnounce(t, s, "a", blob, seq(0, 4), t0)
			if tt.heartbeat >= 0 {
				if err := s.Heartbeat("a", Load{}, at(tt.heartbeat)); err != nil {
					t.Fatal(err)
				}
			}
			// Keep the requester alive whatever a's fate.
			if err := s.Register("r", PeerInfo{}, at(tt.ask)); err != nil {
				t.Fatal(err)
			}
			a := mustParents(t, s, "r", blob, seq(0, 4), at(tt.ask))
			got := slices.Contains(parentIDs(a), "a")
			if got != tt.wantA {
				t.Fatalf("a offered = %v, want %v: %s", got, tt.wantA, describe(a))
			}
			gone := s.Expire(at(tt.ask))
			if tt.wantA == slices.Contains(gone, "a") {
				t.Fatalf("Expire returned %v", gone)
			}
			if !tt.wantA {
				if err := s.Heartbeat("a", Load{}, at(tt.ask)); !errors.Is(err, ErrUnknownPeer) {
					t.Fatalf("heartbeat after expiry: %v, want ErrUnknownPeer", err)
				}
				for _, b := range s.Blobs() {
					if b.Blob == blob && b.Holders != 0 {
						t.Fatalf("expired peer's holdings kept: %+v", b)
					}
				}
			}
		})
	}
}

func TestHeartbeatUnknownPeer(t *testing.T) {
	s := newState(t, nil)
	if err := s.Heartbeat("nobody", Load{}, t0); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("err = %v", err)
	}
	mustRegister(t, s, "a", nil, t0)
	if err := s.Heartbeat("a", Load{ActiveUploads: -1}, t0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative load: err = %v", err)
	}
}

// Registering again starts a new session: holdings are dropped (the peer
// announces in full next), feedback is kept.
func TestReRegisterDropsHoldingsKeepsFeedback(t *testing.T) {
	blob := digest("b")
	s := newState(t, nil)
	mustRegister(t, s, "a", nil, t0)
	mustRegister(t, s, "r", nil, t0)
	mustAnnounce(t, s, "a", blob, []uint32{1}, t0)
	mustParents(t, s, "r", blob, []uint32{1}, t0)
	if _, err := s.Report("r", "a", Outcome{Blob: blob}, t0); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, "a", nil, at(time.Second))
	a := mustParents(t, s, "r", blob, []uint32{1}, at(time.Second))
	if len(a.Parents) != 0 {
		t.Fatalf("old session's holdings offered: %s", describe(a))
	}
	v := s.Peers(at(time.Second))[0]
	if v.ID != "a" || v.Success >= 1 || v.Reports != 1 {
		t.Fatalf("feedback not kept: %+v", v)
	}
}

func TestUnregister(t *testing.T) {
	blob := digest("b")
	s := newState(t, nil)
	mustRegister(t, s, "a", labels("z", "r", "h"), t0)
	mustRegister(t, s, "r", nil, t0)
	mustAnnounce(t, s, "a", blob, []uint32{1}, t0)
	s.Unregister("a")
	s.Unregister("a") // twice is fine
	if a := mustParents(t, s, "r", blob, []uint32{1}, t0); len(a.Parents) != 0 {
		t.Fatalf("unregistered peer offered: %s", describe(a))
	}
	if st := s.Stats(); st.Peers != 1 || st.Holdings != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(s.labels) != 0 {
		t.Fatalf("labels of departed peers kept: %v", s.labels)
	}
}

// TestRegisterCap: past Config.MaxPeers members a new registration is
// refused with ErrTooManyPeers; members registering again are not, and
// are not disturbed; a member that leaves or whose TTL ran out (Expire
// not run yet) frees its place.
func TestRegisterCap(t *testing.T) {
	s := newState(t, func(c *Config) { c.MaxPeers = 3; c.PeerTTL = 10 * time.Second })
	for _, id := range []string{"a", "b", "c"} {
		mustRegister(t, s, id, nil, t0)
	}
	mustAnnounce(t, s, "a", digest("x"), []uint32{1}, t0)
	refused := func(id string, now time.Time) {
		t.Helper()
		if err := s.Register(id, PeerInfo{}, now); !errors.Is(err, ErrTooManyPeers) {
			t.Fatalf("%s at %v: got %v, want ErrTooManyPeers", id, now.Sub(t0), err)
		}
	}
	refused("d", t0)
	refused("d", at(time.Second))
	// A member registers again; its holdings go, as with any new
	// session, but its place stays; the others are untouched.
	mustRegister(t, s, "a", nil, at(2*time.Second))
	mustAnnounce(t, s, "a", digest("x"), []uint32{1}, at(2*time.Second))
	if err := s.Heartbeat("b", Load{}, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	refused("d", at(3*time.Second))
	if got := len(s.Peers(at(3 * time.Second))); got != 3 {
		t.Fatalf("%d members, want 3", got)
	}
	// One leaves: its place goes to the next.
	s.Unregister("c")
	mustRegister(t, s, "d", nil, at(3*time.Second))
	refused("e", at(3*time.Second))
	// d's TTL runs out at 13 s (Expire has not run): e takes its place.
	if err := s.Heartbeat("a", Load{}, at(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat("b", Load{}, at(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	refused("e", at(13*time.Second))
	mustRegister(t, s, "e", nil, at(13*time.Second+1))
	if got := held(s, "a", digest("x")); !slices.Equal(got, []uint32{1}) {
		t.Errorf("a holds %v after the refusals, want [1]", got)
	}
	if err := s.Heartbeat("d", Load{}, at(13*time.Second+1)); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("d after its TTL: got %v, want ErrUnknownPeer", err)
	}
}

// TestRegisterCapPerSource: one machine (PeerInfo.Source) has at most
// Config.MaxPeersPerSource members, so that peer IDs made on one machine
// cannot take every place of Config.MaxPeers; other machines still join.
func TestRegisterCapPerSource(t *testing.T) {
	s := newState(t, func(c *Config) { c.MaxPeersPerSource = 2 })
	const sybil, other = "192.0.2.66", "192.0.2.1"
	reg := func(id, src string) error { return s.Register(id, PeerInfo{Source: src}, t0) }
	for _, id := range []string{"s1", "s2"} {
		if err := reg(id, sybil); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg("s3", sybil); !errors.Is(err, ErrTooManyPeers) {
		t.Fatalf("third peer from one machine: got %v, want ErrTooManyPeers", err)
	}
	if err := reg("h", other); err != nil {
		t.Fatalf("a peer from another machine: %v", err)
	}
	// A member registering again from its machine is not refused...
	if err := reg("s1", sybil); err != nil {
		t.Fatalf("s1 again: %v", err)
	}
	// ...but one moving to a full machine is, and keeps its session.
	mustAnnounce(t, s, "h", digest("x"), []uint32{1}, t0)
	if err := reg("h", sybil); !errors.Is(err, ErrTooManyPeers) {
		t.Fatalf("h moving to a full machine: got %v, want ErrTooManyPeers", err)
	}
	if got := held(s, "h", digest("x")); !slices.Equal(got, []uint32{1}) {
		t.Errorf("h holds %v after its refused move, want [1]", got)
	}
	// s1 moves away: its place on the machine frees.
	if err := reg("s1", "192.0.2.9"); err != nil {
		t.Fatal(err)
	}
	if err := reg("s3", sybil); err != nil {
		t.Fatalf("s3 after s1 moved: %v", err)
	}
	// Peers without a Source are all one machine.
	for i, want := range []error{nil, nil, ErrTooManyPeers} {
		if err := reg(fmt.Sprint("anon", i), ""); !errors.Is(err, want) {
			t.Fatalf("anon%d: got %v, want %v", i, err, want)
		}
	}
}
