package server

import (
	"slices"
	"strings"
	"time"

	"damselfly/scheduler"
)

// choosePreheatTargets returns the peers a preheat goes to: the live,
// unbanned members carrying every label of match; all of them when n is
// 0 or at least their number, otherwise n spread over zones, then racks,
// then hosts (each pick goes to the place with the fewest picks so far).
// Ties go to the lower peer ID, so the choice is deterministic.
func choosePreheatTargets(peers []scheduler.PeerView, now time.Time, match map[string]string, n int) []scheduler.PeerView {
	var cands []scheduler.PeerView
	for _, p := range peers {
		if !p.Alive || p.BannedUntil.After(now) || !hasLabels(p.Labels, match) {
			continue
		}
		cands = append(cands, p)
	}
	slices.SortFunc(cands, func(a, b scheduler.PeerView) int { return strings.Compare(a.ID, b.ID) })
	if n <= 0 || n >= len(cands) {
		return cands
	}
	// Places are nested: a rack is counted within its zone, a host within
	// its rack.
	place := func(p scheduler.PeerView) [3]string {
		z, r, h := p.Labels[scheduler.LabelZone], p.Labels[scheduler.LabelRack], p.Labels[scheduler.LabelHost]
		return [3]string{z, z + "\x00" + r, z + "\x00" + r + "\x00" + h}
	}
	picked := make([]map[string]int, 3)
	for i := range picked {
		picked[i] = make(map[string]int)
	}
	out := make([]scheduler.PeerView, 0, n)
	for len(out) < n {
		best := -1
		var bestKey [3]int
		for i, p := range cands {
			pl := place(p)
			key := [3]int{picked[0][pl[0]], picked[1][pl[1]], picked[2][pl[2]]}
			if best < 0 || less(key, bestKey) {
				best, bestKey = i, key
			}
		}
		p := cands[best]
		pl := place(p)
		for i := range picked {
			picked[i][pl[i]]++
		}
		out = append(out, p)
		cands = slices.Delete(cands, best, best+1)
	}
	return out
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
