package scheduler

import (
	"slices"
	"testing"
	"time"
)

// A parent that answered "not found" is not taken at its word again for
// those chunks until RefuteDuration has passed: its announcements of them
// are held back, then applied (less what it dropped meanwhile).
func TestMissingChunksRefuted(t *testing.T) {
	s := newState(t, func(c *Config) { c.RefuteDuration = 10 * time.Second })
	b := digest("b")
	scene(t, s, nil, []holding{{"a", nil, seq(0, 8)}})
	mustParents(t, s, "r", b, seq(2, 5), t0)
	if _, err := s.Report("r", "a", Outcome{Blob: b, Missing: []uint32{3, 4}}, t0); err != nil {
		t.Fatal(err)
	}
	// The liar announces everything again, one by one and in full.
	mustAnnounce(t, s, "a", b, seq(0, 8), at(time.Second))
	if got, want := held(s, "a", b), []uint32{0, 1, 2, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("after a re-announcement a holds %v, want %v", got, want)
	}
	if _, err := s.AnnounceFull("a", b, BitsetOf(seq(0, 8)...), at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, want := held(s, "a", b), []uint32{0, 1, 2, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("after a full announcement a holds %v, want %v", got, want)
	}
	// Another requester is not sent to a for chunk 3: it is the origin's.
	mustRegister(t, s, "r2", nil, t0)
	ans := mustParents(t, s, "r2", b, []uint32{3}, at(3*time.Second))
	if len(ans.Parents) != 0 || !slices.Equal(ans.Origin, []uint32{3}) {
		t.Fatalf("r2 for chunk 3: %s, want the origin", describe(ans))
	}
	if _, err := s.Drop("a", b, []uint32{4}, at(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	s.Expire(at(9 * time.Second))
	if got, want := held(s, "a", b), []uint32{0, 1, 2, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("before the refutation ends a holds %v, want %v", got, want)
	}
	s.Expire(at(10 * time.Second))
	if got, want := held(s, "a", b), []uint32{0, 1, 2, 3, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("after the refutation a holds %v, want %v (3 held back, 4 dropped)", got, want)
	}
	if s.peers["a"].refuted != nil {
		t.Error("refutation kept after it ended")
	}
	// From now on its announcements count at once.
	mustAnnounce(t, s, "a", b, []uint32{4}, at(11*time.Second))
	if got := held(s, "a", b); !slices.Contains(got, 4) {
		t.Errorf("a holds %v, want 4 in it", got)
	}
}

// An honest parent that evicted a chunk owns up to it with a Drop, before
// or after the requester's report; that first miss is excused, so the
// chunk's next announcement counts at once. A second miss of the same
// chunk within the refutation is refuted, whatever the parent drops.
func TestEvictedChunkExcused(t *testing.T) {
	s := newState(t, func(c *Config) { c.RefuteDuration = 10 * time.Second })
	b := digest("b")
	scene(t, s, nil, []holding{{"a", nil, seq(0, 8)}})
	mustRegister(t, s, "r2", nil, t0)

	// Drop first, then the report: chunk 2 was already dropped.
	mustParents(t, s, "r", b, seq(2, 3), t0)
	if _, err := s.Drop("a", b, []uint32{2}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Report("r", "a", Outcome{Blob: b, Missing: []uint32{2}}, at(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// The report first, then the Drop: chunk 5.
	mustParents(t, s, "r2", b, seq(5, 6), t0)
	if _, err := s.Report("r2", "a", Outcome{Blob: b, Missing: []uint32{5}}, at(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Drop("a", b, []uint32{5}, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Both fetched again: announced, recorded at once.
	mustAnnounce(t, s, "a", b, []uint32{2, 5}, at(3*time.Second))
	if got, want := held(s, "a", b), seq(0, 8); !slices.Equal(got, want) {
		t.Fatalf("after the excused misses a holds %v, want %v", got, want)
	}
	ans := mustParents(t, s, "r", b, []uint32{5}, at(4*time.Second))
	if len(ans.Parents) != 1 || ans.Parents[0].ID != "a" {
		t.Fatalf("r for chunk 5 after a fetched it again: %s, want a", describe(ans))
	}

	// The second miss of chunk 5 is refuted, though a drops it again.
	if _, err := s.Report("r", "a", Outcome{Blob: b, Missing: []uint32{5}}, at(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Drop("a", b, []uint32{5}, at(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	mustAnnounce(t, s, "a", b, []uint32{5}, at(7*time.Second))
	if got := held(s, "a", b); slices.Contains(got, 5) {
		t.Fatalf("a holds %v after a second miss of 5, want 5 held back", got)
	}
	s.Expire(at(15 * time.Second))
	if got := held(s, "a", b); !slices.Contains(got, 5) {
		t.Fatalf("a holds %v after the refutation ended, want 5 applied", got)
	}
	if s.peers["a"].refuted != nil {
		t.Error("refutation kept after it ended")
	}
}

// Refutations are bounded per peer.
func TestRefutationsBounded(t *testing.T) {
	s := newState(t, func(c *Config) { c.MaxChunksPerQuery = 1024 })
	mustRegister(t, s, "r", nil, t0)
	mustRegister(t, s, "a", nil, t0)
	for i := range 40 {
		b := digest(string(rune('A' + i)))
		mustAnnounce(t, s, "a", b, seq(0, 1024), t0)
		mustParents(t, s, "r", b, seq(0, 1024), t0)
		if _, err := s.Report("r", "a", Outcome{Blob: b, Missing: seq(0, 1024)}, t0); err != nil {
			t.Fatal(err)
		}
		mustAnnounce(t, s, "a", b, seq(0, 1024), t0)
	}
	if n := s.peers["a"].refutedSize(); n > maxRefuted {
		t.Fatalf("%d ordinals kept, more than %d", n, maxRefuted)
	}
}

func TestUnionMinus(t *testing.T) {
	if got, want := union([]uint32{1, 3, 5}, []uint32{2, 3, 6}), []uint32{1, 2, 3, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("union: got %v, want %v", got, want)
	}
	if got, want := minus([]uint32{1, 2, 3, 5, 6}, []uint32{2, 5, 7}), []uint32{1, 3, 6}; !slices.Equal(got, want) {
		t.Errorf("minus: got %v, want %v", got, want)
	}
}

// A refuted peer's announcement is held back, but it still ends that
// peer's origin fetch of the chunks: a peer that waited for the fetch is
// given the turn when it asks again, not told to wait until
// OriginTimeout (which stalled reads for a minute and more in the soak).
func TestHeldBackAnnouncementEndsOriginFetch(t *testing.T) {
	s := newState(t, func(c *Config) { c.RefuteDuration = time.Minute; c.OriginFetchers = 1 })
	b := digest("b")
	scene(t, s, nil, []holding{{"a", nil, seq(0, 8)}})
	mustParents(t, s, "r", b, []uint32{3}, t0)
	if _, err := s.Report("r", "a", Outcome{Blob: b, Missing: []uint32{3}}, t0); err != nil {
		t.Fatal(err)
	}
	// a itself now fetches chunk 3 from the origin; w waits for it.
	if ans := mustParents(t, s, "a", b, []uint32{3}, at(time.Second)); !slices.Equal(ans.Origin, []uint32{3}) {
		t.Fatalf("a for chunk 3: %s, want the origin", describe(ans))
	}
	mustRegister(t, s, "w", nil, t0)
	if ans := mustParents(t, s, "w", b, []uint32{3}, at(time.Second)); len(ans.Wait) == 0 {
		t.Fatalf("w for chunk 3 while a fetches it: %s, want to wait", describe(ans))
	}
	mustAnnounce(t, s, "a", b, []uint32{3}, at(2*time.Second))
	if got := held(s, "a", b); slices.Contains(got, 3) {
		t.Fatalf("a holds %v: chunk 3 should be held back", got)
	}
	if ans := mustParents(t, s, "w", b, []uint32{3}, at(3*time.Second)); !slices.Equal(ans.Origin, []uint32{3}) {
		t.Fatalf("w for chunk 3 after a's announcement: %s, want the origin", describe(ans))
	}
}
