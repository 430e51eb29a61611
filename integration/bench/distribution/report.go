package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"damselfly/integration/harness"
)

// Scenario is one cluster shape measured over several runs, with the
// medians over the runs.
type Scenario struct {
	Key         string  `json:"key"`
	Nodes       int     `json:"nodes"`
	ImageMiB    int     `json:"image_mib"`
	NodeMbit    float64 `json:"node_mbit"`
	OriginMbit  float64 `json:"origin_mbit"`
	RTTms       float64 `json:"rtt_ms"`
	P2P         bool    `json:"p2p"`
	Spread      bool    `json:"spread,omitempty"`
	Readers     int     `json:"readers"`
	BatchChunks int     `json:"batch_chunks"`
	// The scheduler's tree settings, when not its defaults.
	MaxChildren   int     `json:"tree_max_children,omitempty"`
	StarveAfterMs float64 `json:"tree_starve_after_ms,omitempty"`
	// The peers' hedge_delay when not their default (negative: off).
	HedgeDelayMs float64 `json:"hedge_delay_ms,omitempty"`
	// The readers reached their node's proxy over its unix socket rather
	// than loopback TCP.
	ReaderSocket bool `json:"reader_socket,omitempty"`
	// The node caches used direct I/O, not the page cache.
	CacheDirect bool `json:"cache_direct,omitempty"`
	// With CacheDirect: the MiB of memory each node cache kept recent
	// chunks in (cache.hot_bytes); absent for none.
	CacheHotMiB int    `json:"cache_hot_mib,omitempty"`
	ImageBytes  int64  `json:"image_bytes"` // stored bytes of every blob
	ChunkBytes  int64  `json:"chunk_bytes"`
	Measured    string `json:"measured"` // UTC, RFC 3339
	Machine     string `json:"machine"`
	Command     string `json:"command"`
	Bound       Bound  `json:"bound"`
	// Medians over Runs.
	OriginRatio float64     `json:"origin_ratio"`
	P50         float64     `json:"p50_seconds"`
	P99         float64     `json:"p99_seconds"`
	Max         float64     `json:"max_seconds"`
	CPUCores    float64     `json:"cpu_cores"` // CPU seconds / slowest node's time
	P50Ratio    float64     `json:"p50_over_bound,omitempty"`
	P99Ratio    float64     `json:"p99_over_bound,omitempty"`
	Runs        []RunResult `json:"runs"`
}

// Targets of issues 4 and 5, for P2P scenarios.
const (
	targetOriginRatio = 1.05 // origin egress / image size
	targetBoundRatio  = 1.5  // p50 and p99 completion / bound
)

// summarise fills the medians and ratios from s.Runs.
func (s *Scenario) summarise() {
	var o, p50, p99, mx, cores []float64
	for _, r := range s.Runs {
		o, p50, p99, mx = append(o, r.OriginRatio), append(p50, r.P50), append(p99, r.P99), append(mx, r.Max)
		if r.Max > 0 {
			cores = append(cores, r.CPUSeconds/r.Max)
		}
	}
	s.OriginRatio, s.P50, s.P99, s.Max, s.CPUCores = median(o), median(p50), median(p99), median(mx), median(cores)
	s.P50Ratio, s.P99Ratio = 0, 0
	if s.Bound.Seconds > 0 {
		s.P50Ratio, s.P99Ratio = s.P50/s.Bound.Seconds, s.P99/s.Bound.Seconds
	}
}

// scenarioKey names a cluster shape; a new measurement of the same shape
// replaces the old one.
func scenarioKey(c Config) string {
	mode := "p2p"
	if !c.P2P {
		mode = "origin-only"
	}
	if c.Spread {
		mode += " spread"
	}
	if d := Default(); c.Readers != d.Readers || c.BatchChunks != d.BatchChunks {
		mode += fmt.Sprintf(" readers=%d batch=%d", c.Readers, c.BatchChunks)
	}
	if c.ReaderSocket {
		mode += " reader=unix"
	}
	if c.CacheDirect {
		mode += " cache=direct"
		if c.CacheHotMiB > 0 {
			mode += fmt.Sprintf(" hot=%dMiB", c.CacheHotMiB)
		}
	}
	if c.MaxChildren != 0 {
		mode += fmt.Sprintf(" tree-max-children=%d", c.MaxChildren)
	}
	if c.StarveAfter != 0 {
		mode += " tree-starve-after=" + c.StarveAfter.String()
	}
	if c.HedgeDelay != 0 {
		mode += " hedge-delay=" + c.HedgeDelay.String()
	}
	return fmt.Sprintf("%dx%dMiB node=%gMbit origin=%gMbit rtt=%s %s", c.Nodes, c.ImageMiB, c.NodeMbit, c.originMbit(), c.RTT, mode)
}

// Report is every scenario measured so far: distribution.json.
type Report struct {
	Scenarios []Scenario `json:"scenarios"`
}

const reportName = "distribution"

// loadReport reads dir/distribution.json; a missing file is an empty
// report.
func loadReport(dir string) (*Report, error) {
	data, err := os.ReadFile(filepath.Join(dir, reportName+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return &Report{}, nil
	}
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s.json: %w", reportName, err)
	}
	return &r, nil
}

// put adds s, replacing a scenario of the same key, and keeps the
// scenarios sorted by size, then P2P first.
func (r *Report) put(s Scenario) {
	r.Scenarios = slices.DeleteFunc(r.Scenarios, func(o Scenario) bool { return o.Key == s.Key })
	r.Scenarios = append(r.Scenarios, s)
	slices.SortStableFunc(r.Scenarios, func(a, b Scenario) int {
		if c := cmp.Compare(int64(a.Nodes)*int64(a.ImageMiB), int64(b.Nodes)*int64(b.ImageMiB)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Nodes, b.Nodes); c != 0 {
			return c
		}
		if a.P2P != b.P2P {
			if a.P2P {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

// write saves dir/distribution.json and dir/distribution.md.
func (r *Report) write(dir string) error {
	return harness.WriteReport(dir, reportName, r, "# damselfly distribution benchmarks\n\n"+r.markdown())
}

// markdown renders the scenarios as a table, then compares each P2P
// scenario with the origin-only one of the same shape.
func (r *Report) markdown() string {
	var b strings.Builder
	b.WriteString("| nodes x image | links (node / origin) | mode | runs | origin egress / image | p50 | p99 | max | bound | p50 / bound | p99 / bound | one-parent star | targets | CPU used | load before | measured |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range r.Scenarios {
		mode := "P2P"
		if !s.P2P {
			mode = "origin only"
		}
		if s.Spread {
			mode += ", spread order"
		}
		if d := Default(); s.Readers != 0 && (s.Readers != d.Readers || s.BatchChunks != d.BatchChunks) {
			mode += fmt.Sprintf(", %d x %d chunks in flight", s.Readers, s.BatchChunks)
		}
		if s.MaxChildren != 0 {
			mode += fmt.Sprintf(", tree_max_children %d", s.MaxChildren)
		}
		if s.StarveAfterMs != 0 {
			mode += fmt.Sprintf(", tree_starve_after %g ms", s.StarveAfterMs)
		}
		if s.HedgeDelayMs != 0 {
			mode += fmt.Sprintf(", hedge_delay %g ms", s.HedgeDelayMs)
		}
		if s.ReaderSocket {
			mode += ", readers over the unix socket"
		}
		if s.CacheDirect {
			mode += ", node caches with direct I/O"
			if s.CacheHotMiB > 0 {
				mode += fmt.Sprintf(" and %d MiB of recent chunks in memory", s.CacheHotMiB)
			}
		}
		bound, p50r, p99r := "—", "—", "—"
		if s.Bound.Seconds > 0 {
			bound = fmt.Sprintf("%.2f s (%s)", s.Bound.Seconds, s.Bound.Binding)
			p50r, p99r = fmt.Sprintf("%.2f", s.P50Ratio), fmt.Sprintf("%.2f", s.P99Ratio)
		}
		star := "—"
		if st := starTime(s); st > 0 {
			star = fmt.Sprintf("%.2f s", st)
		}
		var loads []string
		for _, run := range s.Runs {
			loads = append(loads, strings.Fields(run.Load + " -")[0])
		}
		fmt.Fprintf(&b, "| %d x %d MiB | %s / %s | %s | %d | %.2fx | %.2f s | %.2f s | %.2f s | %s | %s | %s | %s | %s | %.2f cores | %s | %s |\n",
			s.Nodes, s.ImageMiB, mbit(s.NodeMbit), mbit(s.OriginMbit), mode, len(s.Runs), s.OriginRatio, s.P50, s.P99, s.Max,
			bound, p50r, p99r, star, targets(s), s.CPUCores, strings.Join(loads, ", "), s.Measured)
	}
	b.WriteString("\nFigures are medians over the runs; p50 and p99 are nearest-rank percentiles of the nodes' completion times in one run " +
		"(with 16 nodes or fewer, p99 is the slowest node). Origin egress counts every byte the origin's link carried toward the nodes, " +
		"HTTP headers included. CPU used is the CPU time of the whole cluster (one process) over the slowest node's time: " +
		"when it is near what the machine could give, the run measured the CPU, not the links. The one-parent star is how long the " +
		"pull takes when every chunk reaches the other nodes from a single holder, whose uplink they share: (nodes-1) x image/node rate; " +
		"a time near it means the schedule, not the links or the CPU, set the pace.\n")
	for _, s := range r.Scenarios {
		if !s.P2P {
			continue
		}
		for _, o := range r.Scenarios {
			if o.P2P || o.Spread != s.Spread || o.Readers != s.Readers || o.BatchChunks != s.BatchChunks || o.Nodes != s.Nodes || o.ImageMiB != s.ImageMiB || o.NodeMbit != s.NodeMbit || o.OriginMbit != s.OriginMbit {
				continue
			}
			fmt.Fprintf(&b, "\n- %d x %d MiB at %s: with P2P the origin sent %.2fx the image (%.2fx without); p50 %.2f s (%.2f s without), "+
				"slowest node %.2f s (%.2f s without).\n", s.Nodes, s.ImageMiB, mbit(s.NodeMbit), s.OriginRatio, o.OriginRatio, s.P50, o.P50, s.Max, o.Max)
		}
	}
	b.WriteString("\nReproduce:\n\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "    %s\n", s.Command)
	}
	return b.String()
}

// starTime is how long a P2P pull takes when one node holds each chunk
// first and serves it to every other node over its one uplink: the
// other nodes share that uplink, so it sends (nodes-1) images. 0 when it
// does not apply (no P2P, one node, unshaped nodes).
func starTime(s Scenario) float64 {
	if !s.P2P || s.Nodes < 2 || s.NodeMbit <= 0 {
		return 0
	}
	return float64(s.Nodes-1) * float64(s.ImageBytes) / bytesPerSec(s.NodeMbit)
}

// targets says which targets a scenario meets: issue 4's origin egress
// and issue 5's completion times, for P2P; origin-only runs are the
// baseline.
func targets(s Scenario) string {
	if !s.P2P {
		return fmt.Sprintf("baseline (ideal %dx)", s.Nodes)
	}
	yes := map[bool]string{true: "yes", false: "**no**"}
	out := fmt.Sprintf("egress <= %.2fx: %s", targetOriginRatio, yes[s.OriginRatio <= targetOriginRatio])
	if s.Bound.Seconds > 0 {
		out += fmt.Sprintf("; p50, p99 <= %.1fx bound: %s, %s", targetBoundRatio,
			yes[s.P50Ratio <= targetBoundRatio], yes[s.P99Ratio <= targetBoundRatio])
	}
	return out
}

func mbit(v float64) string {
	if v == 0 {
		return "unshaped"
	}
	return fmt.Sprintf("%g Mbit/s", v)
}

// machine describes this machine: cores, CPU model, kernel.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	parts := []string{fmt.Sprintf("%d cores", runtime.NumCPU())}
	for _, p := range []string{model, kernel, runtime.Version()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ", ")
}
