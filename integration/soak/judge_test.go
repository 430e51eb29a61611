package main

import (
	"strings"
	"testing"
	"time"
)

// series builds samples every 30 s in which one process has the given RSS
// (MiB) and fds.
func series(rss []int64, fds []int) []snapshot {
	var out []snapshot
	for i := range rss {
		out = append(out, snapshot{At: float64(30 * i), ReadsOK: int64(i + 1), Procs: []procSample{
			{Name: "node0-peer", Role: "peer", Node: "node0", RSS: rss[i] << 20, FDs: fds[i], Goroutines: 80},
		}})
	}
	return out
}

func TestJudgeGrowth(t *testing.T) {
	flat := []int64{50, 60, 55, 58, 57, 61, 56, 59, 58, 57, 60, 58}
	flatFDs := []int{30, 34, 31, 33, 30, 35, 32, 31, 34, 33, 30, 32}
	leak := []int64{50, 53, 56, 59, 62, 65, 68, 71, 74, 77, 80, 83} // 3 MiB per sample, no end
	fdLeak := []int{30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52}
	for _, tc := range []struct {
		name    string
		rss     []int64
		fds     []int
		warmup  time.Duration
		judged  int
		failing []string // metrics that must fail
	}{
		{name: "steady", rss: flat, fds: flatFDs, judged: 3},
		{name: "rss leak", rss: leak, fds: flatFDs, judged: 3, failing: []string{"rss_bytes"}},
		{name: "fd leak", rss: flat, fds: fdLeak, judged: 3, failing: []string{"fds"}},
		// A big first sample (caches filling) is the warm-up's, not growth;
		// a drop is never a failure.
		{name: "warm-up spike", rss: append([]int64{400}, flat[1:]...), fds: flatFDs, warmup: 30 * time.Second, judged: 3},
		{name: "too few samples", rss: leak[:5], fds: fdLeak[:5], judged: 0},
		{name: "warm-up leaves too few", rss: leak, fds: fdLeak, warmup: 200 * time.Second, judged: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &result{Samples: series(tc.rss, tc.fds), warmup: tc.warmup}
			res.judgeGrowth()
			if len(res.Growth) != tc.judged {
				t.Fatalf("got %d series judged, want %d: %+v", len(res.Growth), tc.judged, res.Growth)
			}
			for _, g := range res.Growth {
				want := true
				for _, m := range tc.failing {
					if g.Metric == m {
						want = false
					}
				}
				if g.OK != want {
					t.Errorf("%s: got ok %v, want %v (%.0f -> %.0f, allowed +%.0f)", g.Metric, g.OK, want, g.First, g.Last, g.Allowed)
				}
			}
		})
	}
}

func TestJudgeProblems(t *testing.T) {
	good := func() *result {
		res := &result{Capacity: 10 << 20, CacheBound: cacheBound(10<<20, 5), nodeNames: []string{"node0"}}
		res.Samples = []snapshot{{At: 0, Nodes: []nodeSample{{Node: "node0", CacheMax: 9 << 20, Capacity: 10 << 20,
			PeerBytes: map[string]int64{"peer": 30 << 20, "origin": 30 << 20}}}}}
		res.Totals = totals{ReadsOK: 10}
		return res
	}
	for _, tc := range []struct {
		name  string
		spoil func(*result)
		want  string // in a problem; "" for none
	}{
		{name: "clean", spoil: func(*result) {}},
		{name: "failed read", spoil: func(r *result) { r.Totals.Failed = 1 }, want: "1 failed"},
		{name: "wrong read", spoil: func(r *result) { r.Totals.Wrong = 2 }, want: "2 wrong"},
		{name: "no reads", spoil: func(r *result) { r.Totals.ReadsOK = 0 }, want: "no read succeeded"},
		{name: "cache over bound", spoil: func(r *result) { r.Samples[0].Nodes[0].CacheMax = r.CacheBound + 1 }, want: "over its bound"},
		{name: "no eviction", spoil: func(r *result) { r.Samples[0].Nodes[0].PeerBytes = map[string]int64{"origin": 5 << 20} }, want: "eviction never had to run"},
		{name: "daemon died", spoil: func(r *result) {
			r.Samples[0].Procs = []procSample{{Name: "node0-peer", Exited: true}}
		}, want: "exited during the run"},
		{name: "stuck read", spoil: func(r *result) { r.Samples[0].Stuck = 1 }, want: "stuck"},
		{name: "mount errors", spoil: func(r *result) { r.Samples[0].Nodes[0].MountVerify = 1 }, want: "verification failures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := good()
			tc.spoil(res)
			res.judge()
			got := strings.Join(res.Problems, "\n")
			if tc.want == "" && got != "" {
				t.Errorf("got problems %q, want none", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("got problems %q, want one with %q", got, tc.want)
			}
			if tc.want == "" && !strings.Contains(res.markdown(), "**PASS**") || tc.want != "" && !strings.Contains(res.markdown(), "**FAIL**") {
				t.Errorf("report verdict does not match the problems %q", got)
			}
		})
	}
}

func TestCacheBound(t *testing.T) {
	// CACHE.md: 1.1 × Capacity for two writers with the defaults.
	if got, want := cacheBound(1000, 2), int64(1100); got != want {
		t.Errorf("cacheBound(1000, 2) = %d, want %d", got, want)
	}
}

func TestLabel(t *testing.T) {
	for _, tc := range []struct{ series, name, want string }{
		{`damselfly_peer_chunk_bytes_total{source="origin"}`, "source", "origin"},
		{`x{a="1",source="peer"}`, "source", "peer"},
		{`x{a="1"}`, "source", ""},
		{`x`, "source", ""},
	} {
		if got := label(tc.series, tc.name); got != tc.want {
			t.Errorf("label(%q, %q) = %q, want %q", tc.series, tc.name, got, tc.want)
		}
	}
}
