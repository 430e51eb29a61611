package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// badScene: "liar" and "good" hold chunks 0..9 of blob b; n victims
// registered. Each victim is first assigned to the liar (good is busy).
func badScene(t *testing.T, s *State, victims int) []string {
	t.Helper()
	mustRegister(t, s, "liar", labels("z", "k", "h"), t0)
	mustRegister(t, s, "good", nil, t0)
	mustAnnounce(t, s, "liar", digest("b"), seq(0, 10), t0)
	mustAnnounce(t, s, "good", digest("b"), seq(0, 10), t0)
	var ids []string
	for i := range victims {
		id := fmt.Sprintf("v%d", i)
		mustRegister(t, s, id, labels("z", "k", "h"), t0) // on the liar's host: it ranks first
		ids = append(ids, id)
	}
	return ids
}

// accuseOnce has victim ask for chunk c, expects the liar, and reports
// bad bytes.
func accuseOnce(t *testing.T, s *State, victim string, c uint32, now time.Time) (bool, error) {
	t.Helper()
	a := mustParents(t, s, victim, digest("b"), []uint32{c}, now)
	if got := parentIDs(a); !slices.Equal(got, []string{"liar"}) {
		t.Fatalf("%s: parents %v, want [liar]", victim, got)
	}
	return s.Report(victim, "liar", Outcome{Blob: digest("b"), BadBytes: true, BadChunk: c}, now)
}

func TestBadBytesBan(t *testing.T) {
	tests := []struct {
		name      string
		quorum    int
		accusers  int
		wantBan   bool
		wantAfter string // liar's chunks left after the reports (victim i accuses chunk 3+i)
	}{
		{"quorum 1: one accuser bans", 1, 1, true, "[]"},
		{"quorum 2: one accuser does not", 2, 1, false, without(seq(0, 10), 3)},
		{"quorum 2: two accusers ban", 2, 2, true, "[]"},
		{"quorum 3: two accusers do not", 3, 2, false, "[0 1 2 5 6 7 8 9]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.BanQuorum = tt.quorum })
			victims := badScene(t, s, tt.accusers)
			var banned bool
			for i, v := range victims {
				b, err := accuseOnce(t, s, v, uint32(3+i), t0)
				if err != nil {
					t.Fatal(err)
				}
				banned = banned || b
			}
			if banned != tt.wantBan {
				t.Fatalf("banned = %v, want %v", banned, tt.wantBan)
			}
			if got := fmt.Sprint(held(s, "liar", digest("b"))); got != tt.wantAfter {
				t.Fatalf("liar holds %s", got)
			}
			// Accusers never get the liar again; others only if not banned.
			for _, v := range victims {
				if a := mustParents(t, s, v, digest("b"), []uint32{8}, t0); slices.Contains(parentIDs(a), "liar") {
					t.Fatalf("accuser %s sent to the liar again", v)
				}
			}
			mustRegister(t, s, "bystander", labels("z", "k", "h"), t0)
			a := mustParents(t, s, "bystander", digest("b"), []uint32{8}, t0)
			if got := slices.Contains(parentIDs(a), "liar"); got == tt.wantBan {
				t.Fatalf("bystander offered liar = %v with ban = %v", got, tt.wantBan)
			}
			if bans := s.Bans(t0); (len(bans) == 1) != tt.wantBan {
				t.Fatalf("bans %+v", bans)
			}
		})
	}
}

// without prints s without one member.
func without(s []uint32, c uint32) string {
	return fmt.Sprint(slices.DeleteFunc(slices.Clone(s), func(x uint32) bool { return x == c }))
}

func TestBannedPeerNeverReturnedUntilExpiry(t *testing.T) {
	s := newState(t, func(c *Config) { c.BanDuration = time.Minute; c.PeerTTL = time.Hour })
	badScene(t, s, 0)
	mustRegister(t, s, "r", nil, t0)
	s.Ban("liar", t0)
	for i := range 50 {
		now := at(time.Duration(i) * time.Second)
		if a := mustParents(t, s, "r", digest("b"), seq(0, 10), now); slices.Contains(parentIDs(a), "liar") {
			t.Fatalf("banned peer named at %v", now)
		}
	}
	if _, err := s.Announce("liar", digest("b"), seq(0, 10), at(59*time.Second)); !errors.Is(err, ErrBanned) {
		t.Fatalf("announce while banned: %v", err)
	}
	// The ban ends: the peer announces again and is offered again.
	after := at(time.Minute)
	s.Expire(after)
	if len(s.Bans(after)) != 0 {
		t.Fatal("ban kept after expiry")
	}
	mustAnnounce(t, s, "liar", digest("b"), seq(0, 10), after)
	s.Unregister("good")
	if a := mustParents(t, s, "r", digest("b"), seq(0, 10), after); !slices.Equal(parentIDs(a), []string{"liar"}) {
		t.Fatalf("after the ban: %s", describe(a))
	}
}

// A ban outlives the session: leaving and joining again does not lift it.
func TestBanSurvivesReRegister(t *testing.T) {
	s := newState(t, nil)
	badScene(t, s, 0)
	s.Ban("liar", t0)
	s.Unregister("liar")
	mustRegister(t, s, "liar", nil, at(time.Second))
	if _, err := s.Announce("liar", digest("b"), seq(0, 10), at(time.Second)); !errors.Is(err, ErrBanned) {
		t.Fatalf("announce after rejoining: %v", err)
	}
}

// Reports need an assignment; each assignment takes one report.
func TestReportNeedsAssignment(t *testing.T) {
	tests := []struct {
		name string
		do   func(t *testing.T, s *State) error
		want error
	}{
		{"never assigned", func(t *testing.T, s *State) error {
			_, err := s.Report("v0", "liar", Outcome{Blob: digest("b"), BadBytes: true, BadChunk: 3}, t0)
			return err
		}, ErrNoAssignment},
		{"other blob", func(t *testing.T, s *State) error {
			mustParents(t, s, "v0", digest("b"), []uint32{3}, t0)
			_, err := s.Report("v0", "liar", Outcome{Blob: digest("c")}, t0)
			return err
		}, ErrNoAssignment},
		{"chunk outside the assignment", func(t *testing.T, s *State) error {
			mustParents(t, s, "v0", digest("b"), []uint32{3}, t0)
			_, err := s.Report("v0", "liar", Outcome{Blob: digest("b"), BadBytes: true, BadChunk: 4}, t0)
			return err
		}, ErrNoAssignment},
		{"reported twice", func(t *testing.T, s *State) error {
			mustParents(t, s, "v0", digest("b"), []uint32{3}, t0)
			if _, err := s.Report("v0", "liar", Outcome{Blob: digest("b"), OK: true}, t0); err != nil {
				t.Fatal(err)
			}
			_, err := s.Report("v0", "liar", Outcome{Blob: digest("b")}, t0)
			return err
		}, ErrNoAssignment},
		{"assignment timed out", func(t *testing.T, s *State) error {
			mustParents(t, s, "v0", digest("b"), []uint32{3}, t0)
			_, err := s.Report("v0", "liar", Outcome{Blob: digest("b")}, at(s.cfg.LeaseTimeout))
			return err
		}, ErrNoAssignment},
		{"about itself", func(t *testing.T, s *State) error {
			_, err := s.Report("v0", "v0", Outcome{}, t0)
			return err
		}, ErrInvalid},
		{"unknown reporter", func(t *testing.T, s *State) error {
			_, err := s.Report("x", "liar", Outcome{}, t0)
			return err
		}, ErrUnknownPeer},
		{"banned reporter accuses", func(t *testing.T, s *State) error {
			s.Ban("v0", t0)
			mustParents(t, s, "v0", digest("b"), []uint32{3}, t0)
			_, err := s.Report("v0", "liar", Outcome{Blob: digest("b"), BadBytes: true, BadChunk: 3}, t0)
			return err
		}, ErrBanned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.BanQuorum = 1 })
			badScene(t, s, 1)
			if err := tt.do(t, s); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if len(s.Bans(t0)) != 0 && tt.name != "banned reporter accuses" {
				t.Fatal("a rejected report banned someone")
			}
		})
	}
}

// Accusations are rate-limited per reporter, and rejoining does not
// refill the budget.
func TestAccusationRateLimit(t *testing.T) {
	s := newState(t, func(c *Config) {
		c.AccusationBurst, c.AccusationRefill, c.BanQuorum, c.PeerTTL = 2, time.Minute, 100, time.Hour
	})
	mustRegister(t, s, "v", nil, t0)
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		mustRegister(t, s, id, nil, t0)
		mustAnnounce(t, s, id, digest("b"), []uint32{uint32(i)}, t0)
	}
	accuse := func(target int, now time.Time) error {
		mustParents(t, s, "v", digest("b"), []uint32{uint32(target)}, now)
		_, err := s.Report("v", fmt.Sprintf("t%d", target), Outcome{Blob: digest("b"), BadBytes: true, BadChunk: uint32(target)}, now)
		return err
	}
	for i, want := range []error{nil, nil, ErrRateLimited} {
		if err := accuse(i, t0); !errors.Is(err, want) {
			t.Fatalf("accusation %d: %v, want %v", i, err, want)
		}
	}
	s.Unregister("v")
	mustRegister(t, s, "v", nil, at(time.Second))
	if err := accuse(3, at(time.Second)); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("after rejoining: %v", err)
	}
	if err := accuse(3, at(time.Minute+time.Second)); err != nil {
		t.Fatalf("after refill: %v", err)
	}
}

// A failure or a slow transfer lowers a peer's rank below an equal peer.
func TestFeedbackLowersRank(t *testing.T) {
	tests := []struct {
		name    string
		outcome Outcome
	}{
		{"failure", Outcome{OK: false}},
		{"slow", Outcome{OK: true, Bytes: 1 << 20, Duration: time.Second}}, // 1 MiB/s vs 25 MiB/s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil)
			scene(t, s, nil, []holding{{"a", nil, seq(0, 4)}, {"b", nil, seq(0, 4)}})
			a := mustParents(t, s, "r", digest("b"), []uint32{0}, t0)
			first := a.Parents[0].ID
			other := map[string]string{"a": "b", "b": "a"}[first]
			o := tt.outcome
			o.Blob = digest("b")
			if _, err := s.Report("r", first, o, t0); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				a := mustParents(t, s, "r", digest("b"), []uint32{uint32(i % 4)}, t0)
				if got := parentIDs(a); !slices.Equal(got, []string{other}) {
					t.Fatalf("query %d: parents %v, want [%s]", i, got, other)
				}
				if _, err := s.Report("r", other, Outcome{Blob: digest("b"), OK: true}, t0); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestReportMissingClearsHolding(t *testing.T) {
	s := newState(t, nil)
	scene(t, s, nil, []holding{{"a", nil, seq(0, 8)}})
	mustParents(t, s, "r", digest("b"), seq(2, 5), t0)
	// 7 is outside the assignment: a reporter cannot clear what it was not sent for.
	if _, err := s.Report("r", "a", Outcome{Blob: digest("b"), Missing: []uint32{3, 7}}, t0); err != nil {
		t.Fatal(err)
	}
	if got, want := held(s, "a", digest("b")), []uint32{0, 1, 2, 4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("holds %v, want %v", got, want)
	}
}

// Assignments count as load until reported or timed out.
func TestLeasesCountAsLoad(t *testing.T) {
	s := newState(t, func(c *Config) { c.LeaseTimeout = 10 * time.Second; c.MaxLeasesPerPeer = 3 })
	scene(t, s, nil, []holding{{"a", nil, seq(0, 4)}})
	pending := func(now time.Time) int { return s.Peers(now)[0].Pending }
	for range 5 {
		mustParents(t, s, "r", digest("b"), []uint32{0}, t0)
	}
	if n := pending(t0); n != 3 {
		t.Fatalf("pending %d, want 3 (MaxLeasesPerPeer)", n)
	}
	if _, err := s.Report("r", "a", Outcome{Blob: digest("b"), OK: true}, t0); err != nil {
		t.Fatal(err)
	}
	if n := pending(t0); n != 2 {
		t.Fatalf("pending after a report %d, want 2", n)
	}
	s.Expire(at(10 * time.Second))
	if n := pending(at(10 * time.Second)); n != 0 {
		t.Fatalf("pending after timeout %d, want 0", n)
	}
}

// Accusations age out: two accusers more than BanDuration apart do not
// make a quorum; an accuser's avoidance ends; Expire forgets it all.
func TestAccusationsAgeOut(t *testing.T) {
	s := newState(t, func(c *Config) { c.BanDuration = time.Minute; c.PeerTTL = time.Hour })
	victims := badScene(t, s, 2)
	if _, err := accuseOnce(t, s, victims[0], 3, t0); err != nil {
		t.Fatal(err)
	}
	later := at(time.Minute)
	banned, err := accuseOnce(t, s, victims[1], 4, later)
	if err != nil || banned {
		t.Fatalf("stale accusation counted: banned %v, %v", banned, err)
	}
	// v0's avoidance of the liar has ended.
	if a := mustParents(t, s, victims[0], digest("b"), []uint32{5}, later); !slices.Equal(parentIDs(a), []string{"liar"}) {
		t.Fatalf("avoidance outlived BanDuration: %s", describe(a))
	}
	s.Expire(at(3 * time.Minute))
	if len(s.accused) != 0 || len(s.reporters) != 0 {
		t.Fatalf("kept %d accusation lists and %d reporter records", len(s.accused), len(s.reporters))
	}
	for _, v := range victims {
		if s.peers[v].rep != nil {
			t.Fatalf("%s still points at a forgotten reporter record", v)
		}
	}
}

// A requester that registers again gives back its outstanding assignments.
func TestReRegisterReleasesAssignments(t *testing.T) {
	s := newState(t, nil)
	scene(t, s, nil, []holding{{"a", nil, seq(0, 4)}})
	mustParents(t, s, "r", digest("b"), []uint32{0}, t0)
	mustParents(t, s, "r", digest("b"), []uint32{1}, t0)
	if n := s.Peers(t0)[0].Pending; n != 2 {
		t.Fatalf("pending %d", n)
	}
	mustRegister(t, s, "r", nil, at(time.Second))
	if n := s.Peers(t0)[0].Pending; n != 0 {
		t.Fatalf("pending after the requester re-registered: %d", n)
	}
	if _, err := s.Report("r", "a", Outcome{Blob: digest("b")}, at(time.Second)); !errors.Is(err, ErrNoAssignment) {
		t.Fatalf("report on an old session's assignment: %v", err)
	}
}

// TestBanQuorumCountsMachines: a ban quorum counts the machines
// accusations come from (PeerInfo.Source, as the transport saw it), not
// peer IDs, which cost nothing: many peer IDs on one machine accusing an
// honest parent do not get it banned; accusers on enough machines do.
func TestBanQuorumCountsMachines(t *testing.T) {
	sybils := func(n int) []string {
		var src []string
		for range n {
			src = append(src, "192.0.2.66")
		}
		return src
	}
	tests := []struct {
		name    string
		quorum  int
		sources []string // one accuser each, in order; "" = no Source
		wantBan bool
	}{
		{"sybil: 50 peer IDs on one machine", 2, sybils(50), false},
		{"sybil plus one other machine, quorum 3", 3, append(sybils(50), "192.0.2.1"), false},
		{"sybil plus two other machines, quorum 3", 3, append(sybils(50), "192.0.2.1", "2001:db8:1::"), true},
		{"two machines, quorum 2", 2, []string{"192.0.2.1", "192.0.2.2"}, true},
		{"no source counts as one machine", 2, []string{"", "", ""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, func(c *Config) { c.BanQuorum = tt.quorum })
			mustRegister(t, s, "honest", nil, t0)
			mustAnnounce(t, s, "honest", digest("b"), seq(0, 100), t0)
			var banned bool
			for i, src := range tt.sources {
				id := fmt.Sprintf("accuser%d", i)
				if err := s.Register(id, PeerInfo{Source: src}, t0); err != nil {
					t.Fatal(err)
				}
				c := uint32(i)
				if a := mustParents(t, s, id, digest("b"), []uint32{c}, t0); !slices.Equal(parentIDs(a), []string{"honest"}) {
					t.Fatalf("%s: parents %v, want [honest]", id, parentIDs(a))
				}
				b, err := s.Report(id, "honest", Outcome{Blob: digest("b"), BadBytes: true, BadChunk: c}, t0)
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				if b && i != len(tt.sources)-1 {
					t.Fatalf("banned by accuser %d of %d", i+1, len(tt.sources))
				}
				banned = banned || b
			}
			if banned != tt.wantBan {
				t.Fatalf("banned = %v, want %v", banned, tt.wantBan)
			}
			mustRegister(t, s, "bystander", nil, t0)
			a := mustParents(t, s, "bystander", digest("b"), []uint32{99}, t0)
			if offered := slices.Contains(parentIDs(a), "honest"); offered == tt.wantBan {
				t.Fatalf("bystander offered the accused = %v with ban = %v", offered, tt.wantBan)
			}
			bans := s.Bans(t0)
			if (len(bans) == 1) != tt.wantBan {
				t.Fatalf("bans %+v", bans)
			}
			if tt.wantBan && len(bans[0].Accusers) != tt.quorum {
				t.Errorf("ban names accusers %v, want one per machine (%d)", bans[0].Accusers, tt.quorum)
			}
		})
	}
}
