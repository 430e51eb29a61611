package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"damselfly/rafs"
)

// noteWaits keeps exactly the waits of a plain map of (blob, chunk) to
// start time, as first written: forget served chunks, forget waits long
// past when the new ones would not fit, add new ones while there is room.
func TestNoteWaitsMatchesMap(t *testing.T) {
	type key struct {
		blob  rafs.Digest
		chunk uint32
	}
	s := newState(t, func(c *Config) { c.TreeStarveAfter = 100 * time.Millisecond })
	long := 4 * s.cfg.TreeStarveAfter.Nanoseconds()
	model := map[key]int64{}
	noteModel := func(blob rafs.Digest, ans *Answer, tw []uint32, nowNs int64) {
		for _, p := range ans.Parents {
			for _, c := range p.Chunks {
				delete(model, key{blob, c})
			}
		}
		for _, c := range ans.Origin {
			delete(model, key{blob, c})
		}
		if len(tw) == 0 {
			return
		}
		if len(model)+len(tw) > maxWaitsPerPeer {
			maps.DeleteFunc(model, func(_ key, t int64) bool { return nowNs-t > long })
		}
		for _, c := range tw {
			if _, ok := model[key{blob, c}]; !ok && len(model) < maxWaitsPerPeer {
				model[key{blob, c}] = nowNs
			}
		}
	}
	rng := newRand(5)
	chunks := func(n int) []uint32 {
		var cs []uint32
		for range rng.IntN(n + 1) {
			cs = append(cs, uint32(rng.IntN(2000)))
		}
		slices.Sort(cs)
		return slices.Compact(cs)
	}
	r := &peer{id: "r"}
	now := t0
	for i := range 5000 {
		now = now.Add(time.Duration(rng.IntN(30)-5) * time.Millisecond)
		if rng.IntN(50) == 0 { // callers' clocks need not agree
			now = now.Add(-300 * time.Millisecond)
		}
		blob := digest(fmt.Sprint(rng.IntN(3)))
		var ans Answer
		for range rng.IntN(3) {
			ans.Parents = append(ans.Parents, Parent{Chunks: chunks(30)})
		}
		ans.Origin = chunks(10)
		var tw []uint32
		switch rng.IntN(3) {
		case 0:
			tw = chunks(200)
		case 1:
			tw = chunks(8)
		}
		noteModel(blob, &ans, tw, now.UnixNano())
		s.noteWaits(r, blob, &ans, tw, now)

		got := map[key]int64{}
		n := 0
		for d, ws := range r.waits {
			if len(ws) == 0 || !slices.IsSortedFunc(ws, func(a, b chunkWait) int { return int(a.chunk) - int(b.chunk) }) {
				t.Fatalf("step %d: waits for a blob empty or unsorted: %v", i, ws)
			}
			for _, w := range ws {
				got[key{d, w.chunk}] = w.since
				n++
			}
		}
		if !maps.Equal(got, model) || n != len(got) || r.nwaits != n {
			t.Fatalf("step %d: %d waits (%d distinct, count %d), want %d", i, n, len(got), r.nwaits, len(model))
		}
		for _, since := range got {
			if since < r.waitsFrom {
				t.Fatalf("step %d: a wait began at %d, before waitsFrom %d", i, since, r.waitsFrom)
			}
		}
	}
}
