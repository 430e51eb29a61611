package main

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	const image, rate = 25_000_000, 200_000_000 // 1 s floor
	runs := []*runResult{
		{Nodes: 2, Mode: modeP2P, Run: 1, Ready: 1, Seconds: []float64{1.2, 1.4}, OriginTx: 26_000_000,
			NodeRx: []int64{1, 2}, Peer: []float64{2, 4}, Skopeo: []float64{1, 1}, Scheduler: 0.5, Registry: 0.5},
		{Nodes: 2, Mode: modeOrigin, Run: 1, Ready: 1, Seconds: []float64{2, 2.1}, OriginTx: 50_000_000,
			NodeRx: []int64{1, 2}, Peer: []float64{1, 1}, Skopeo: []float64{1, 1}, Registry: 1},
		{Nodes: 2, Mode: modeP2P, Run: 2, Ready: 1, Seconds: []float64{1.6, 1.8}, OriginTx: 30_000_000,
			NodeRx: []int64{1, 2}, Peer: []float64{2, 2}, Skopeo: []float64{1, 1}, Scheduler: 0.5, Registry: 0.5},
	}
	rows := summarize(runs, image, rate)
	if len(rows) != 2 || rows[0].Mode != modeP2P || rows[1].Mode != modeOrigin {
		t.Fatalf("got rows %+v, want p2p then origin", rows)
	}
	p := rows[0]
	if p.Runs != 2 || p.Floor != 1 || p.Bound != 1 || p.Max != 1.6 || p.P50 != 1.4 {
		t.Errorf("p2p row: got runs %d floor %v bound %v max %v p50 %v, want 2, 1, 1, 1.6, 1.4", p.Runs, p.Floor, p.Bound, p.Max, p.P50)
	}
	if p.Copies != 1.12 || p.Peer != 2.5 {
		t.Errorf("p2p row: got copies %v peer %v, want 1.12, 2.5", p.Copies, p.Peer)
	}
	if o := rows[1]; o.Bound != 2 || o.Copies != 2 {
		t.Errorf("origin row: got bound %v copies %v, want 2, 2", o.Bound, o.Copies)
	}
	if got := p.targets(); !strings.Contains(got, "copies <= 1.05: **no**") || !strings.Contains(got, "floor: **no**") {
		t.Errorf("targets: got %q, want both missed", got)
	}
	rep := &report{RateBps: rate, Image: &pullImage{Repo: "bench/pull", Tag: "t", Bytes: image}, Rows: rows, Runs: runs,
		Env: map[string]string{"machine": "test"}}
	md := rep.markdown()
	for _, want := range []string{"| 2 | p2p | 2 |", "| 2 | origin | 1 |", "baseline (ideal 2x)", "200 Mbit/s"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
