package main

import (
	"fmt"
	"slices"
	"strings"

	"damselfly/integration/harness"
)

// Targets of issue 21 for P2P pulls: the origin sends at most this many
// copies of the image, and the slowest node finishes within this many
// link floors.
const (
	targetCopies = 1.05
	targetFloors = 1.5
)

// report is OUT/pulls.json.
type report struct {
	Date    string            `json:"date"`
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
	RateBps int64             `json:"rate_bps"`
	Image   *pullImage        `json:"image"`
	Rows    []row             `json:"rows"`
	Runs    []*runResult      `json:"runs"`
	Notes   []string          `json:"notes,omitempty"`
}

// row sums up the runs of one (nodes, mode).
type row struct {
	Nodes int    `json:"nodes"`
	Mode  string `json:"mode"`
	Runs  int    `json:"runs"`
	// Floor is the image's bytes over the link rate, Bound the mode's
	// floor (boundSeconds).
	Floor float64 `json:"floor_seconds"`
	Bound float64 `json:"bound_seconds"`
	// P50, P99 and Max are the nodes' completion times of a run, each
	// the median over the runs.
	P50   float64 `json:"p50_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
	Ready float64 `json:"ready_seconds"`
	// OriginBytes is the median of what the origin's interface sent;
	// Copies that over the image's bytes.
	OriginBytes float64 `json:"origin_bytes"`
	Copies      float64 `json:"copies"`
	// CPU-seconds, medians over the runs of the mean over the nodes
	// (peer, skopeo), and of the cluster-wide daemons.
	Peer      float64 `json:"peer_cpu"`
	Skopeo    float64 `json:"skopeo_cpu"`
	Scheduler float64 `json:"scheduler_cpu"`
	Registry  float64 `json:"registry_cpu"`
	// Cores is every process's CPU-seconds over the run's wall time
	// (ready plus the slowest node), median over runs: near the
	// machine's core count, the row measures the machine.
	Cores float64 `json:"cores"`
	// MedianRun is the run whose slowest node is the median, for the
	// per-node table.
	MedianRun *runResult `json:"-"`
}

// summarize groups runs into rows, in the order they ran.
func summarize(runs []*runResult, imageBytes, rate int64) []row {
	type key struct {
		nodes int
		mode  string
	}
	var order []key
	groups := map[key][]*runResult{}
	for _, r := range runs {
		k := key{r.Nodes, r.Mode}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var rows []row
	for _, k := range order {
		rs := groups[k]
		w := row{Nodes: k.nodes, Mode: k.mode, Runs: len(rs), Floor: floorSeconds(imageBytes, rate),
			Bound: boundSeconds(k.mode, k.nodes, imageBytes, rate)}
		var p50, p99, mx, ready, origin, peer, skopeo, sched, reg, cores []float64
		for _, r := range rs {
			p50 = append(p50, quantile(r.Seconds, 0.5))
			p99 = append(p99, quantile(r.Seconds, 0.99))
			mx = append(mx, quantile(r.Seconds, 1))
			ready = append(ready, r.Ready)
			origin = append(origin, float64(r.OriginTx))
			peer, skopeo = append(peer, mean(r.Peer)), append(skopeo, mean(r.Skopeo))
			sched, reg = append(sched, r.Scheduler), append(reg, r.Registry)
			cores = append(cores, runCores(r))
		}
		w.P50, w.P99, w.Max, w.Ready, w.OriginBytes = median(p50), median(p99), median(mx), median(ready), median(origin)
		w.Copies = w.OriginBytes / float64(max(imageBytes, 1))
		w.Peer, w.Skopeo, w.Scheduler, w.Registry, w.Cores = median(peer), median(skopeo), median(sched), median(reg), median(cores)
		byMax := slices.Clone(rs)
		slices.SortFunc(byMax, func(a, b *runResult) int {
			x, y := quantile(a.Seconds, 1), quantile(b.Seconds, 1)
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		w.MedianRun = byMax[(len(byMax)-1)/2]
		rows = append(rows, w)
	}
	return rows
}

// runCores is r's CPU-seconds over all its processes per second of its
// wall time, from the registry's start to the slowest node's end.
func runCores(r *runResult) float64 {
	total := r.Scheduler + r.Registry
	for i := range r.Peer {
		total += r.Peer[i]
	}
	for i := range r.Skopeo {
		total += r.Skopeo[i]
	}
	wall := r.Ready + quantile(r.Seconds, 1)
	if !(wall > 0) {
		return 0
	}
	return total / wall
}

// targets is the row's verdict against issue 21's targets (P2P rows
// only; a no-P2P row is the baseline).
func (w row) targets() string {
	if w.Mode != modeP2P {
		return fmt.Sprintf("baseline (ideal %dx)", w.Nodes)
	}
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	return fmt.Sprintf("copies <= %.2f: %s; max <= %.1fx floor: %s", targetCopies, yes(w.Copies <= targetCopies),
		targetFloors, yes(w.Max <= targetFloors*w.Floor))
}

// markdown is OUT/pulls.md.
func (rep *report) markdown() string {
	var b strings.Builder
	pi := rep.Image
	fmt.Fprintf(&b, "# Plain pulls through the peers' mirrors (issue 21)\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; `%s`.\n\n", rep.Date, rep.Env["machine"], harness.Esc(rep.Command))
	fmt.Fprintf(&b, "Separate `damselfly scheduler` and `damselfly peer` processes and a docker-registry origin, each node's peer and the "+
		"origin and scheduler in network namespaces of their own, every link capped by the kernel (tc tbf) at %s each way. "+
		"Every node runs `skopeo copy docker://%s/%s:%s %s:...` in its namespace at the same moment, through its peer's mirror "+
		"(default registry: the origin); every run starts from new daemons and empty caches. p2p: peers with a scheduler; origin: "+
		"the same peers without one (no P2P), so each mirror pulls every blob from the origin.\n\n",
		rateName(rep.RateBps), mirrorAddr, pi.Repo, pi.Tag, rep.Env["dest"])
	fmt.Fprintf(&b, "Image: %s; %d layers, %s with config and manifest (%d bytes).\n\n", pi.Source, len(pi.Layers), mib(pi.Bytes), pi.Bytes)
	b.WriteString("Floor: the image's bytes over one node's link rate. Bound: the floor with P2P; without, the origin's link carries the " +
		"image once per node (nodes x floor). Completion: from the common start of the skopeo processes to each one's exit (exit status " +
		"0 and every layer present at its size; skopeo checks the digests); p50/p99/max over the nodes of a run, medians over runs. " +
		"Origin sent: what the origin's interface sent from the registry's start to the end of the pulls (frames, headers included), " +
		"and copies of the image. CPU: user+sys seconds from /proc/PID/stat at the end of the pulls (skopeo's from wait4), per node the " +
		"mean over the nodes; cores is every process's CPU-seconds together over the run's wall time (deployment plus pulls).\n\n")
	b.WriteString("| nodes | mode | runs | image | floor | bound | p50 | p99 | max | max/floor | ready | origin sent (copies) | CPU/node peer | skopeo | scheduler | registry | cores | targets |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range rep.Rows {
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s | %.2fx | %.2f s | %s (%.2f) | %.2f | %.2f | %.2f | %.2f | %.1f | %s |\n",
			w.Nodes, w.Mode, w.Runs, mib(pi.Bytes), w.Floor, w.Bound, w.P50, w.P99, w.Max, w.Max/w.Floor, w.Ready,
			mib(int64(w.OriginBytes)), w.Copies, w.Peer, w.Skopeo, w.Scheduler, w.Registry, w.Cores, w.targets())
	}
	b.WriteString("\nPer node, the run with the median slowest node of each row (completion s; CPU-seconds peer / skopeo; MiB received):\n\n")
	b.WriteString("| nodes | mode | run | load before | per node |\n|---|---|---|---|---|\n")
	for _, w := range rep.Rows {
		r := w.MedianRun
		var cells []string
		for i := range r.Seconds {
			cells = append(cells, fmt.Sprintf("node%d %.2f s, %.2f/%.2f, %.0f", i+1, r.Seconds[i], r.Peer[i], r.Skopeo[i], float64(r.NodeRx[i])/(1<<20)))
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s |\n", w.Nodes, w.Mode, r.Run, r.Load, strings.Join(cells, "; "))
	}
	b.WriteString("\nWhat the origin sent of each layer in those runs, from its access log (GETs, MiB; the layers in manifest order):\n\n")
	b.WriteString("| nodes | mode | run | per layer |\n|---|---|---|---|\n")
	for _, w := range rep.Rows {
		r := w.MedianRun
		var cells []string
		for i, l := range pi.Layers {
			var got originBlob
			for _, ob := range r.OriginBlobs {
				if ob.Digest == l.Digest {
					got = ob
				}
			}
			cells = append(cells, fmt.Sprintf("%d: %dx, %.1f of %.1f", i+1, got.Requests, float64(got.Bytes)/(1<<20), float64(l.Size)/(1<<20)))
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s |\n", w.Nodes, w.Mode, r.Run, strings.Join(cells, "; "))
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// rateName is bits/s as "200 Mbit/s".
func rateName(bps int64) string {
	switch {
	case bps >= 1e9 && bps%1e9 == 0:
		return fmt.Sprintf("%d Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%g Mbit/s", float64(bps)/1e6)
	}
	return fmt.Sprintf("%d bit/s", bps)
}
