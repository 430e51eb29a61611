package server

import (
	"fmt"
	"testing"
	"time"

	"damselfly/scheduler"
)

func TestChoosePreheatTargets(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	var peers []scheduler.PeerView
	// Two zones: a has racks r1 (hosts h1, h2) and r2 (h3); b has one
	// rack and one host.
	for i, l := range []map[string]string{
		{"zone": "a", "rack": "r1", "host": "h1"},
		{"zone": "a", "rack": "r1", "host": "h1"},
		{"zone": "a", "rack": "r1", "host": "h2"},
		{"zone": "a", "rack": "r2", "host": "h3"},
		{"zone": "b", "rack": "r1", "host": "h4"},
		{"zone": "b", "rack": "r1", "host": "h4"},
	} {
		peers = append(peers, scheduler.PeerView{ID: fmt.Sprintf("p%d", i), Labels: l, Alive: true})
	}
	dead := scheduler.PeerView{ID: "p6", Labels: map[string]string{"zone": "a"}}
	banned := scheduler.PeerView{ID: "p7", Labels: map[string]string{"zone": "a"}, Alive: true, BannedUntil: now.Add(time.Minute)}
	unbanned := scheduler.PeerView{ID: "p8", Labels: map[string]string{"zone": "c"}, Alive: true, BannedUntil: now.Add(-time.Minute)}
	all := append(append([]scheduler.PeerView{}, peers...), dead, banned, unbanned)

	ids := func(v []scheduler.PeerView) string {
		s := ""
		for _, p := range v {
			s += p.ID + " "
		}
		return s
	}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		n      int
		want   string
	}{
		{"all", nil, 0, "p0 p1 p2 p3 p4 p5 p8 "},
		{"more than there are", nil, 100, "p0 p1 p2 p3 p4 p5 p8 "},
		{"one per zone first", nil, 3, "p0 p4 p8 "},
		{"racks then hosts within a zone", map[string]string{"zone": "a"}, 3, "p0 p3 p2 "},
		{"label", map[string]string{"zone": "b"}, 0, "p4 p5 "},
		{"two labels", map[string]string{"zone": "a", "host": "h1"}, 0, "p0 p1 "},
		{"no match", map[string]string{"zone": "z"}, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(choosePreheatTargets(all, now, tt.labels, tt.n)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
