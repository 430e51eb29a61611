package main

import (
	"fmt"
	"slices"
)

// Growth criterion. Only samples taken after the warm-up count, and at
// least minGrowthSamples of them, or the process is not judged. They are
// split in thirds; a process fails when the median of the last third
// exceeds the median of the first third by more than the allowance:
//
//	RSS         max(25% of the first median, 16 MiB)
//	fds         max(10% of the first median, 8)
//	goroutines  max(25% of the first median, 50)
//
// Medians of thirds ignore single spikes (a GC cycle, a burst of
// concurrent requests); the absolute floors keep small, noisy figures from
// failing on a few MiB or descriptors. Anything that grows without bound
// over ten minutes passes these allowances, and steady state never does.
const minGrowthSamples = 6

type growthRow struct {
	Process string  `json:"process"`
	Metric  string  `json:"metric"` // rss_bytes, fds, goroutines
	Samples int     `json:"samples"`
	First   float64 `json:"first_third_median"`
	Last    float64 `json:"last_third_median"`
	Allowed float64 `json:"allowed_growth"`
	OK      bool    `json:"ok"`
}

// judge fills res.Growth and res.Problems from the samples and totals.
func (res *result) judge() {
	t := &res.Totals
	if t.Failed > 0 || t.Wrong > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d failed and %d wrong reads", t.Failed, t.Wrong))
	}
	if t.ReadsOK == 0 {
		res.Problems = append(res.Problems, "no read succeeded")
	}
	var fetchedLast int64
	for i, s := range res.Samples {
		if s.Stuck > 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("%d reads stuck over %s at %.0f s", s.Stuck, readTimeout, s.At))
		}
		for _, p := range s.Procs {
			if p.Exited {
				res.Problems = append(res.Problems, fmt.Sprintf("%s exited during the run (seen at %.0f s)", p.Name, s.At))
			}
		}
		var fetched int64
		for _, n := range s.Nodes {
			t.CacheMax = max(t.CacheMax, n.CacheMax)
			t.TmpMax = max(t.TmpMax, n.TmpMax)
			if n.CacheMax > n.Capacity {
				t.OverCapacity++
			}
			if n.CacheMax > res.CacheBound {
				res.Problems = append(res.Problems, fmt.Sprintf("%s cache held %d bytes at %.0f s, over its bound of %d (capacity %d)",
					n.Node, n.CacheMax, s.At, res.CacheBound, n.Capacity))
			}
			fetched += n.PeerBytes["peer"] + n.PeerBytes["origin"]
			if i == len(res.Samples)-1 && (n.MountErrors > 0 || n.MountVerify > 0) {
				res.Problems = append(res.Problems, fmt.Sprintf("%s mounts counted %d read errors and %d verification failures",
					n.Node, n.MountErrors, n.MountVerify))
			}
		}
		fetchedLast = fetched
	}
	t.Fetched = fetchedLast
	if nodes := int64(len(res.nodeNames)); nodes > 0 && t.Fetched <= nodes*res.Capacity {
		res.Problems = append(res.Problems, fmt.Sprintf("the peers fetched %d bytes into %d caches of %d: eviction never had to run",
			t.Fetched, nodes, res.Capacity))
	}
	res.judgeGrowth()
	for _, g := range res.Growth {
		if !g.OK {
			res.Problems = append(res.Problems, fmt.Sprintf("%s %s grew from %.0f to %.0f (allowed +%.0f)", g.Process, g.Metric, g.First, g.Last, g.Allowed))
		}
	}
}

func (res *result) judgeGrowth() {
	type key struct{ proc, metric string }
	series := map[key][]float64{}
	var order []key
	add := func(k key, v float64) {
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], v)
	}
	for _, s := range res.Samples {
		if s.At < res.warmup.Seconds() {
			continue
		}
		for _, p := range s.Procs {
			if p.Exited {
				continue
			}
			add(key{p.Name, "rss_bytes"}, float64(p.RSS))
			add(key{p.Name, "fds"}, float64(p.FDs))
			if p.Goroutines >= 0 {
				add(key{p.Name, "goroutines"}, float64(p.Goroutines))
			}
		}
	}
	for _, k := range order {
		v := series[k]
		if len(v) < minGrowthSamples {
			continue
		}
		third := len(v) / 3
		first, last := median(v[:third]), median(v[len(v)-third:])
		var allowed float64
		switch k.metric {
		case "rss_bytes":
			allowed = max(first/4, 16<<20)
		case "fds":
			allowed = max(first/10, 8)
		case "goroutines":
			allowed = max(first/4, 50)
		}
		res.Growth = append(res.Growth, growthRow{Process: k.proc, Metric: k.metric, Samples: len(v),
			First: first, Last: last, Allowed: allowed, OK: last-first <= allowed})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
