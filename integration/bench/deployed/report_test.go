package main

import (
	"math"
	"strings"
	"testing"

	"damselfly/rafs/convert"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	bi := &benchImage{Name: "img", Convert: &convert.Result{BootstrapLayer: 1_000_000},
		Need: map[string]int64{workloadAll: 25_000_000, workloadStartup: 2_500_000}, PlainBytes: 50_000_000}
	run := func(mode string, n, seq int, secs ...float64) *runResult {
		r := &runResult{Nodes: len(secs), Mode: mode, Workload: workloadAll, Run: seq, Ready: 1, Seconds: secs,
			OriginTx: int64(n) * 26_000_000, Registry: 2, NodeRx: make([]int64, len(secs))}
		for range secs {
			if mode == modePull {
				r.CPU = append(r.CPU, nodeCPU{Skopeo: 1.5, Umoci: 4, Reader: 0.5})
			} else {
				r.CPU = append(r.CPU, nodeCPU{Mount: 1, Peer: 2, Reader: 0.5})
			}
		}
		if mode == modeP2P {
			r.Scheduler = 1
		}
		return r
	}
	runs := []*runResult{
		run(modeP2P, 1, 1, 2, 3, 4, 5), run(modeOrigin, 4, 1, 4, 4, 4, 9),
		run(modeP2P, 1, 2, 1, 1, 1, 1), run(modeOrigin, 4, 2, 5, 5, 5, 5),
		run(modeP2P, 1, 3, 6, 6, 6, 7), run(modeOrigin, 4, 3, 6, 6, 6, 6),
		run(modePull, 8, 1, 9, 9, 9, 12),
	}
	rows := summarize(runs, bi, 200_000_000)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3 (p2p, origin, pull)", len(rows))
	}
	p, o, u := rows[0], rows[1], rows[2]
	if p.Mode != modeP2P || o.Mode != modeOrigin || p.Runs != 3 {
		t.Fatalf("rows %s/%d runs, %s: want p2p with 3 runs, then origin", p.Mode, p.Runs, o.Mode)
	}
	// Per run p50 over 4 nodes (nearest rank: the 2nd), max; medians.
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"p2p floor", p.Floor, 1}, {"p2p bound", p.Bound, 1}, {"origin bound", o.Bound, 4},
		{"p2p p50", p.P50, 3}, {"p2p max", p.Max, 5}, {"origin p50", o.P50, 5}, {"origin max", o.Max, 6},
		{"p2p origin bytes", p.OriginBytes, 26_000_000}, {"origin copies", o.OriginBytes / float64(o.ImageBytes), 4},
		{"mount", p.Mount, 1}, {"node max", p.NodeMax, 3.5}, {"scheduler", p.Scheduler, 1}, {"origin scheduler", o.Scheduler, 0},
		// (4 nodes x 3.5 + 1 scheduler + 2 registry) / (1 ready + 5 slowest).
		{"p2p cores", p.Cores, 17.0 / 6},
		// The pull mode needs the plain image: 2 s at 200 Mbit/s, 8 s for
		// four nodes through the origin; 8 x 26 MB of 50 MB sent.
		{"pull floor", u.Floor, 2}, {"pull bound", u.Bound, 8}, {"pull copies", u.OriginBytes / float64(u.ImageBytes), 4.16},
		{"pull skopeo", u.Skopeo, 1.5}, {"pull umoci", u.Umoci, 4}, {"pull mount", u.Mount, 0}, {"pull node max", u.NodeMax, 6},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if p.MedianRun.Run != 1 || o.MedianRun.Run != 3 {
		t.Errorf("median runs: got %d and %d, want 1 and 3", p.MedianRun.Run, o.MedianRun.Run)
	}
	md := (&report{Image: &benchImage{Name: "img", Convert: &convert.Result{}, PlainBytes: bi.PlainBytes}, RateBps: 200e6, Rows: rows,
		Env: map[string]string{"workers": "4"}}).markdown()
	for _, want := range []string{"200 Mbit/s", "| 4 | p2p | all | 3 |", "| 4 | origin | all | 3 |", "| 4 | pull | all | 1 | 47.7 MiB |",
		"node4 12.00 s, 1.50/4.00/0.50"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
