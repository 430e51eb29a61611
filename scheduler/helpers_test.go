package scheduler

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"damselfly/rafs"
)

// t0 is the start of every test's clock.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus d: tests pass times explicitly, the clock is theirs.
func at(d time.Duration) time.Time { return t0.Add(d) }

// digest returns a distinct blob digest for name.
func digest(name string) rafs.Digest { return rafs.Digest(sha256.Sum256([]byte(name))) }

// newState returns a State with the default config changed by edit, and
// jitter off unless edit turns it on, so rankings are exact.
func newState(t testing.TB, edit func(*Config)) *State {
	t.Helper()
	cfg := Default()
	cfg.Jitter = 0
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// labels builds PeerInfo labels "zone/rack/host"; empty parts are unset.
func labels(zone, rack, host string) map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{LabelZone: zone, LabelRack: rack, LabelHost: host} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// mustRegister registers id on a machine of its own (Source).
func mustRegister(t testing.TB, s *State, id string, l map[string]string, now time.Time) {
	t.Helper()
	if err := s.Register(id, PeerInfo{Addrs: []string{"/ip4/127.0.0.1/tcp/1/p2p/" + id}, Labels: l, Source: "machine-" + id}, now); err != nil {
		t.Fatal(err)
	}
}

func mustAnnounce(t testing.TB, s *State, id string, blob rafs.Digest, chunks []uint32, now time.Time) []string {
	t.Helper()
	w, err := s.Announce(id, blob, chunks, now)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustParents(t testing.TB, s *State, id string, blob rafs.Digest, chunks []uint32, now time.Time) Answer {
	t.Helper()
	a, err := s.Parents(id, blob, chunks, now)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, a, chunks)
	return a
}

// checkPartition fails unless every chunk asked for is placed exactly
// once in a, and every list is ascending.
func checkPartition(t testing.TB, a Answer, asked []uint32) {
	t.Helper()
	seen := map[uint32]int{}
	add := func(where string, cs []uint32) {
		if !slices.IsSorted(cs) {
			t.Errorf("%s chunks %v not ascending", where, cs)
		}
		for _, c := range cs {
			seen[c]++
		}
	}
	for _, p := range a.Parents {
		if len(p.Chunks) == 0 {
			t.Errorf("parent %s named with no chunks", p.ID)
		}
		add("parent "+p.ID, p.Chunks)
	}
	add("origin", a.Origin)
	for _, w := range a.Wait {
		add("wait", w.Chunks)
	}
	want := slices.Compact(slices.Sorted(slices.Values(asked)))
	for _, c := range want {
		if seen[c] != 1 {
			t.Errorf("chunk %d placed %d times in %s", c, seen[c], describe(a))
		}
	}
	if len(seen) != len(want) {
		t.Errorf("answer places %d chunks, asked %d: %s", len(seen), len(want), describe(a))
	}
}

// describe renders an answer compactly for failure messages.
func describe(a Answer) string {
	s := ""
	for _, p := range a.Parents {
		s += fmt.Sprintf("%s%v ", p.ID, p.Chunks)
	}
	if len(a.Origin) > 0 {
		s += fmt.Sprintf("origin%v ", a.Origin)
	}
	for _, w := range a.Wait {
		s += fmt.Sprintf("wait%v for %v after %v ", w.Chunks, w.Fetchers, w.RetryAfter)
	}
	return "[" + s + "]"
}

// parentIDs returns the IDs named in a, in order.
func parentIDs(a Answer) []string {
	var ids []string
	for _, p := range a.Parents {
		ids = append(ids, p.ID)
	}
	return ids
}

// seq returns lo, lo+1, ..., hi-1.
func seq(lo, hi uint32) []uint32 {
	var s []uint32
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// newRand returns a seeded random source for generated scenes.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
