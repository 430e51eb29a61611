package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// State is soft: a scheduler that restarts empty answers as before once
// peers have registered again and announced in full.
func TestRestartRebuildsFromFullAnnouncements(t *testing.T) {
	blobs := []string{"x", "y"}
	// What each peer's node cache holds, by blob.
	caches := map[string]map[string][]uint32{
		"a": {"x": seq(0, 50), "y": seq(0, 10)},
		"b": {"x": seq(50, 100)},
		"c": {"y": seq(10, 30)},
	}
	build := func(s *State, now time.Time) {
		for _, id := range []string{"a", "b", "c", "r"} {
			mustRegister(t, s, id, labels("z", "", id), now)
			for blob, cs := range caches[id] {
				if _, err := s.AnnounceFull(id, digest(blob), BitsetOf(cs...), now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	ask := func(s *State, now time.Time) string {
		var out string
		for _, blob := range blobs {
			a := mustParents(t, s, "r", digest(blob), seq(0, 100), now)
			out += fmt.Sprintf("%s: %s\n", blob, describe(a))
		}
		return out
	}
	before := newState(t, nil)
	build(before, t0)
	want := ask(before, t0)

	restarted := newState(t, nil)
	now := at(time.Minute)
	// The restarted scheduler does not know the peers: their heartbeats
	// fail, which is their cue to register and announce in full.
	if err := restarted.Heartbeat("a", Load{}, now); err == nil {
		t.Fatal("restarted scheduler knew a peer")
	}
	build(restarted, now)
	if got := ask(restarted, now); got != want {
		t.Fatalf("after restart:\n%s\nbefore:\n%s", got, want)
	}
	if !slices.Equal(summary(before.Blobs()), summary(restarted.Blobs())) {
		t.Fatalf("holdings differ: %v vs %v", before.Blobs(), restarted.Blobs())
	}
}

func summary(bs []BlobView) []string {
	var out []string
	for _, b := range bs {
		out = append(out, fmt.Sprintf("%x %d %d %d", b.Blob[:4], b.Holders, b.Chunks, b.Copies))
	}
	return out
}
