package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// NodeResult is what one node did in one run.
type NodeResult struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"` // from the common start to its last chunk
	// Bytes were delivered to the node's readers; PeerBytes and
	// OriginBytes are where its peer daemon got them.
	Bytes       int64 `json:"bytes"`
	PeerBytes   int64 `json:"peer_bytes"`
	OriginBytes int64 `json:"origin_bytes"`
	// DuplicateBytes arrived for chunks the node already had (the
	// second copy of a hedged fetch); Hedges counts the hedged fetches.
	// Absent in runs recorded before they were (and when 0).
	DuplicateBytes int64 `json:"duplicate_bytes,omitempty"`
	Hedges         int64 `json:"hedges,omitempty"`
}

// RunResult is one run of a scenario.
type RunResult struct {
	// OriginBytes is what crossed the origin's link toward the nodes
	// (chunk data plus HTTP headers); OriginRatio divides it by the
	// image's size.
	OriginBytes int64   `json:"origin_bytes"`
	OriginRatio float64 `json:"origin_ratio"`
	P50         float64 `json:"p50_seconds"`
	P99         float64 `json:"p99_seconds"`
	Max         float64 `json:"max_seconds"`
	Load        string  `json:"loadavg_before"`
	// CPUSeconds is the CPU time this process (the whole cluster) used
	// from the start to the last node's end; divided by Max it is the
	// cores it kept busy. A figure near the cores the machine could give
	// it means the run was CPU-bound, not link-bound.
	CPUSeconds float64 `json:"cpu_seconds"`
	// SysSeconds is the kernel's part of CPUSeconds, PageFaults the
	// process's minor page faults over the same span; absent in runs
	// recorded before they were.
	SysSeconds float64 `json:"sys_seconds,omitempty"`
	PageFaults int64   `json:"page_faults,omitempty"`
	// CacheReads counts the chunks the nodes read from their caches (to
	// serve other nodes, mostly); HotReads those of them served from the
	// caches' memory (cache.hot_bytes) rather than their files.
	CacheReads uint64       `json:"cache_reads,omitempty"`
	HotReads   uint64       `json:"hot_reads,omitempty"`
	Nodes      []NodeResult `json:"nodes"`
}

// measure runs the scenario once: a fresh cluster, every node pulling the
// whole image at the same moment.
func measure(ctx context.Context, cfg Config, img *image, registryAddr, dir string, log *slog.Logger) (_ RunResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return RunResult{}, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	c, err := startCluster(ctx, cfg, dir, registryAddr, log)
	if err != nil {
		return RunResult{}, err
	}
	defer func() { err = errors.Join(err, c.stop()) }()

	us := units(img, cfg.BatchChunks)
	res := RunResult{Load: loadavg(), Nodes: make([]NodeResult, len(c.nodes))}
	start := make(chan struct{})
	var t0 time.Time
	g, gctx := errgroup.WithContext(ctx)
	for i := range c.nodes {
		order := us
		if cfg.Spread {
			order = rotate(us, i*len(us)/len(c.nodes))
		}
		down := downlink(bytesPerSec(cfg.NodeMbit), us)
		g.Go(func() error {
			select {
			case <-start:
			case <-gctx.Done():
				return gctx.Err()
			}
			n, err := pull(gctx, c.urls[i], img.repo, order, cfg.Readers, down)
			res.Nodes[i] = NodeResult{Name: fmt.Sprintf("node%d", i), Seconds: time.Since(t0).Seconds(), Bytes: n}
			if err != nil {
				return fmt.Errorf("node%d: %w", i, err)
			}
			if n != img.bytes {
				return fmt.Errorf("node%d: received %d bytes, want %d", i, n, img.bytes)
			}
			return nil
		})
	}
	cpu0, sys0, faults0 := usage()
	t0 = time.Now()
	close(start)
	if err := g.Wait(); err != nil {
		return RunResult{}, err
	}
	cpu1, sys1, faults1 := usage()
	res.CPUSeconds, res.SysSeconds, res.PageFaults = cpu1-cpu0, sys1-sys0, faults1-faults0
	for i, d := range c.nodes {
		st := d.Node().Stats()
		res.Nodes[i].PeerBytes, res.Nodes[i].OriginBytes = st.PeerBytes, st.OriginBytes
		res.Nodes[i].DuplicateBytes, res.Nodes[i].Hedges = st.DuplicateBytes, st.Hedges
		cs := d.CacheStats()
		res.CacheReads += cs.Hits
		res.HotReads += cs.HotHits
	}
	res.OriginBytes = c.origin.Stats().DownBytes
	res.OriginRatio = float64(res.OriginBytes) / float64(img.bytes)
	var times []float64
	for _, n := range res.Nodes {
		times = append(times, n.Seconds)
	}
	res.P50, res.P99, res.Max = percentile(times, 0.50), percentile(times, 0.99), slices.Max(times)
	return res, nil
}

// percentile is the nearest-rank q-quantile of xs (not modified).
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// median is the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuTime is the user and system CPU seconds this process has used.
func cpuTime() float64 {
	cpu, _, _ := usage()
	return cpu
}

// usage is the process's CPU time (user plus system) in seconds, its
// system time alone, and the page faults it took without I/O: first
// touches of memory, which are dear on virtual machines whose host
// takes freed memory back.
func usage() (cpu, sys float64, faults int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds(), ru.Minflt
}

// loadavg is /proc/loadavg's first three fields, or "" where there is
// none.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	var a, b5, c float64
	if _, err := fmt.Sscan(string(b), &a, &b5, &c); err != nil {
		return ""
	}
	return fmt.Sprintf("%.2f %.2f %.2f", a, b5, c)
}
