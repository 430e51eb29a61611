package main

import (
	"fmt"
	"slices"
	"strings"

	"damselfly/integration/harness"
)

// report is OUT/deployed.json.
type report struct {
	Date    string            `json:"date"`
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
	RateBps int64             `json:"rate_bps"`
	Image   *benchImage       `json:"image"`
	Rows    []row             `json:"rows"`
	Runs    []*runResult      `json:"runs"`
	Notes   []string          `json:"notes,omitempty"`
}

// row sums up the runs of one (nodes, mode, workload).
type row struct {
	Nodes    int    `json:"nodes"`
	Mode     string `json:"mode"`
	Workload string `json:"workload"`
	Runs     int    `json:"runs"`
	// NeedBytes is what each node must receive once its mount is up
	// (benchImage.Need), in the pull mode the plain image (PlainBytes);
	// Floor is that over the link rate, and Bound the mode's floor
	// (boundSeconds).
	NeedBytes int64   `json:"need_bytes"`
	Floor     float64 `json:"floor_seconds"`
	Bound     float64 `json:"bound_seconds"`
	// P50, P99 and Max are the nodes' completion times of a run, each the
	// median over the runs.
	P50   float64 `json:"p50_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
	Ready float64 `json:"ready_seconds"`
	// OriginBytes is the median of what the origin's interface sent;
	// ImageBytes what one node needs in all (bootstrap layer and Need),
	// so OriginBytes/ImageBytes is how many copies the origin sent.
	OriginBytes float64 `json:"origin_bytes"`
	ImageBytes  int64   `json:"image_bytes"`
	// CPU-seconds, medians over the runs: per node the mean over the
	// nodes (and the busiest node's total), and the cluster-wide daemons.
	Mount     float64 `json:"mount_cpu"`
	Peer      float64 `json:"peer_cpu"`
	Skopeo    float64 `json:"skopeo_cpu,omitempty"`
	Umoci     float64 `json:"umoci_cpu,omitempty"`
	Reader    float64 `json:"reader_cpu"`
	NodeMax   float64 `json:"node_max_cpu"`
	Scheduler float64 `json:"scheduler_cpu"`
	Registry  float64 `json:"registry_cpu"`
	// Cores is the cores every process of a run kept busy together: all
	// their CPU-seconds over the run's wall time (ready plus the slowest
	// node), median over runs. Near the machine's core count, a row
	// measures the machine rather than the links.
	Cores float64 `json:"cores"`
	// MedianRun is the run whose slowest node is the median, for the
	// per-node table.
	MedianRun *runResult `json:"-"`
}

// summarize groups runs into rows, in the order they ran.
func summarize(runs []*runResult, bi *benchImage, rate int64) []row {
	type key struct {
		nodes          int
		mode, workload string
	}
	var order []key
	groups := map[key][]*runResult{}
	for _, r := range runs {
		k := key{r.Nodes, r.Mode, r.Workload}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var rows []row
	for _, k := range order {
		rs := groups[k]
		need, image := bi.Need[k.workload], bi.Need[k.workload]+bi.Convert.BootstrapLayer
		if k.mode == modePull {
			need, image = bi.PlainBytes, bi.PlainBytes
		}
		w := row{Nodes: k.nodes, Mode: k.mode, Workload: k.workload, Runs: len(rs), NeedBytes: need,
			Floor: floorSeconds(need, rate), Bound: boundSeconds(k.mode, k.nodes, need, rate),
			ImageBytes: image}
		var p50, p99, mx, ready, origin, mount, peer, skopeo, umoci, reader, nodeMax, sched, reg, cores []float64
		for _, r := range rs {
			p50 = append(p50, quantile(r.Seconds, 0.5))
			p99 = append(p99, quantile(r.Seconds, 0.99))
			mx = append(mx, quantile(r.Seconds, 1))
			ready = append(ready, r.Ready)
			origin = append(origin, float64(r.OriginTx))
			var m, p, sk, um, rd, top float64
			for _, c := range r.CPU {
				m, p, sk, um, rd = m+c.Mount, p+c.Peer, sk+c.Skopeo, um+c.Umoci, rd+c.Reader
				top = max(top, c.total())
			}
			n := float64(max(len(r.CPU), 1))
			mount, peer, reader, nodeMax = append(mount, m/n), append(peer, p/n), append(reader, rd/n), append(nodeMax, top)
			skopeo, umoci = append(skopeo, sk/n), append(umoci, um/n)
			sched, reg = append(sched, r.Scheduler), append(reg, r.Registry)
			cores = append(cores, runCores(r))
		}
		w.P50, w.P99, w.Max, w.Ready, w.OriginBytes = median(p50), median(p99), median(mx), median(ready), median(origin)
		w.Mount, w.Peer, w.Reader, w.NodeMax = median(mount), median(peer), median(reader), median(nodeMax)
		w.Skopeo, w.Umoci = median(skopeo), median(umoci)
		w.Scheduler, w.Registry, w.Cores = median(sched), median(reg), median(cores)
		byMax := slices.Clone(rs)
		slices.SortFunc(byMax, func(a, b *runResult) int {
			return cmpFloat(quantile(a.Seconds, 1), quantile(b.Seconds, 1))
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
	for _, c := range r.CPU {
		total += c.total()
	}
	wall := r.Ready + quantile(r.Seconds, 1)
	if !(wall > 0) {
		return 0
	}
	return total / wall
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// markdown is OUT/deployed.md.
func (rep *report) markdown() string {
	var b strings.Builder
	bi := rep.Image
	fmt.Fprintf(&b, "# Deployed distribution (issue 24)\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; `%s`.\n\n", rep.Date, rep.Env["machine"], harness.Esc(rep.Command))
	fmt.Fprintf(&b, "Separate `damselfly scheduler`, `damselfly peer` and `damselfly mount` processes and a docker-registry origin, "+
		"each node (a peer and its mount, sharing the node cache) and the origin and scheduler in network namespaces of their own, "+
		"every link capped by the kernel (tc tbf) at %s each way. All nodes' readers start at once, through the FUSE mounts, "+
		"after every mount is up; every run starts from new daemons and empty caches. "+
		"p2p: peers with a scheduler. origin: the same peers without one (the in-process harness's -p2p=false baseline), "+
		"so each node's misses go to the origin. pull: no damselfly; every node runs `skopeo copy` of the plain (gzip) image "+
		"from the origin into an OCI layout and `umoci unpack`, then the same reader on the unpacked tree (what a node without "+
		"lazy loading pays; need is then the plain image, %s).\n\n", rateName(rep.RateBps), mib(bi.PlainBytes))
	fmt.Fprintf(&b, "Image: %s (`%s`): %d files, %s; RAFS blobs %s, bootstrap layer %s. Workloads: **all** reads every regular file "+
		"(%s readers in one process per node); **startup** is %s (%d files, %s).\n\n",
		bi.Name, harness.Esc(bi.Source), bi.Files, mib(bi.FileBytes), mib(bi.Convert.NewBlobBytes), mib(bi.Convert.BootstrapLayer),
		rep.workers(), bi.StartupFrom, len(bi.Startup), mib(bi.StartupBytes))
	b.WriteString("Floor: the stored (compressed) bytes of the distinct chunks of the files a node reads, which it must receive " +
		"after its mount is up, divided by the link rate. Bound: the floor with P2P; registry-only, the origin's link must carry it once " +
		"per node (nodes x floor). Completion: from the readers' common start to each node's reader exit; p50/p99/max over the " +
		"nodes of a run, medians over runs. Origin bytes: what the origin's interface sent from its start to the end of the reads " +
		"(frames, headers included); copies = that over a node's bootstrap layer plus chunks. CPU: user+sys seconds from /proc/PID/stat " +
		"at the end of the reads (the reader's from wait4, children included), per node the mean over the nodes; cores is every process's " +
		"CPU-seconds together over the run's wall time (deployment plus reads): near the machine's cores, the row measures the machine, " +
		"not the links.\n\n")
	b.WriteString("| nodes | mode | workload | runs | need/node | floor | bound | p50 | p99 | max | p99/bound | ready | origin sent (copies) | CPU/node mount | peer | skopeo | umoci | reader | busiest node | scheduler | registry | cores |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range rep.Rows {
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %s | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s | %.2fx | %.2f s | %s (%.2f) | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f |\n",
			w.Nodes, w.Mode, w.Workload, w.Runs, mib(w.NeedBytes), w.Floor, w.Bound, w.P50, w.P99, w.Max, w.P99/w.Bound, w.Ready,
			mib(int64(w.OriginBytes)), w.OriginBytes/float64(max(w.ImageBytes, 1)), w.Mount, w.Peer, w.Skopeo, w.Umoci, w.Reader,
			w.NodeMax, w.Scheduler, w.Registry, w.Cores)
	}
	b.WriteString("\nPer node, the run with the median slowest node of each row (completion s; CPU-seconds mount / peer / reader, " +
		"in the pull mode skopeo / umoci / reader; MiB received):\n\n")
	b.WriteString("| nodes | mode | workload | run | load before | per node |\n|---|---|---|---|---|---|\n")
	for _, w := range rep.Rows {
		r := w.MedianRun
		var cells []string
		for i := range r.Seconds {
			c := r.CPU[i]
			a, p := c.Mount, c.Peer
			if r.Mode == modePull {
				a, p = c.Skopeo, c.Umoci
			}
			cells = append(cells, fmt.Sprintf("node%d %.2f s, %.2f/%.2f/%.2f, %.0f", i+1, r.Seconds[i],
				a, p, c.Reader, float64(r.NodeRx[i])/(1<<20)))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %s | %s |\n", w.Nodes, w.Mode, w.Workload, r.Run, r.Load, strings.Join(cells, "; "))
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func (rep *report) workers() string { return rep.Env["workers"] }

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
