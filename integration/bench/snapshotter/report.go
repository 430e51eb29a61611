package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// target is issue 22's: the lazy start within this fraction of the full
// pull's.
const target = 0.2

// report is OUT/snapshotter.json.
type report struct {
	Date    string            `json:"date"`
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
	Image   imageInfo         `json:"image"`
	Program string            `json:"program"`
	Rows    []row             `json:"rows"`
	Runs    []*runResult      `json:"runs"`
}

// row is one link: medians over the rounds of each mode.
type row struct {
	Link string `json:"link"`
	Runs int    `json:"runs"`
	// RAFS, Startup and Overlay are median seconds from the start of
	// the pull to the first output; the Pull fields the pull alone.
	RAFS        float64 `json:"rafs_first_output_seconds"`
	Startup     float64 `json:"startup_first_output_seconds"`
	Overlay     float64 `json:"overlay_first_output_seconds"`
	RAFSPull    float64 `json:"rafs_pull_seconds"`
	StartupPull float64 `json:"startup_pull_seconds"`
	OverlayPull float64 `json:"overlay_pull_seconds"`
	// Ratio and StartupRatio are RAFS and Startup over Overlay, each a
	// median; Met and StartupMet say whether they are within target.
	Ratio        float64 `json:"ratio"`
	Met          bool    `json:"met"`
	StartupRatio float64 `json:"startup_ratio"`
	StartupMet   bool    `json:"startup_met"`
	// Bytes over the link, medians.
	RAFSBytes    float64 `json:"rafs_link_bytes"`
	StartupBytes float64 `json:"startup_link_bytes"`
	OverlayBytes float64 `json:"overlay_link_bytes"`
}

func (r *report) summarize(links []string) {
	for _, l := range links {
		var x row
		x.Link = l
		pick := func(mode string, f func(*runResult) float64) float64 {
			var v []float64
			for _, res := range r.Runs {
				if res.Link == l && res.Mode == mode {
					v = append(v, f(res))
				}
			}
			return median(v)
		}
		for _, res := range r.Runs {
			if res.Link == l && res.Mode == modeRAFS {
				x.Runs++
			}
		}
		first := func(r *runResult) float64 { return r.FirstOutput }
		pull := func(r *runResult) float64 { return r.Pull }
		bytes := func(r *runResult) float64 { return float64(r.LinkBytes) }
		x.RAFS, x.Startup, x.Overlay = pick(modeRAFS, first), pick(modeStartup, first), pick(modeOverlay, first)
		x.RAFSPull, x.StartupPull, x.OverlayPull = pick(modeRAFS, pull), pick(modeStartup, pull), pick(modeOverlay, pull)
		x.RAFSBytes, x.StartupBytes, x.OverlayBytes = pick(modeRAFS, bytes), pick(modeStartup, bytes), pick(modeOverlay, bytes)
		if x.Overlay > 0 {
			x.Ratio, x.StartupRatio = x.RAFS/x.Overlay, x.Startup/x.Overlay
		}
		x.Met = x.Ratio > 0 && x.Ratio <= target
		x.StartupMet = x.StartupRatio > 0 && x.StartupRatio <= target
		r.Rows = append(r.Rows, x)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// linkName says what a profile is.
func linkName(l string) string { return links[l].String() }

func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString("# Container start through damselfly snapshotter (issue 22)\n\n")
	fmt.Fprintf(&b, "Measured %s (`%s`; %s; %s; load average before: %s). ", r.Date, r.Command, r.Env["machine"], r.Env["containerd"], r.Env["loadavg_before"])
	fmt.Fprintf(&b, "The Debian image (Python, NumPy, SciPy; %s of gzip layers, %d files; RAFS blobs %s, bootstrap layer %s) from a docker-registry "+
		"behind a shaped link; each run a cold containerd, snapshotter and node cache. Time from the start of the pull (containerd's client "+
		"library with the labels CRI passes) to the container's first line, `python3 -c %q`. RAFS: the RAFS-only tag through "+
		"`damselfly snapshotter` (one lazy mount, chunks fetched on read, `convert` defaults); RAFS + startup prefetch: the same converted with "+
		"`--prefetch-patterns` naming the %d files (%s) the import opens (strace in an unpacked copy), which the mount daemon prefetches "+
		"first from a blob of their own; overlayfs: the plain tag, downloaded and unpacked in full. "+
		"Medians of %d rounds, the three modes in an order that rotates each round. Target: ≤ %.1fx overlayfs.\n\n",
		mib(r.Image.PlainBytes), r.Image.Convert.Stats.Files, mib(r.Image.Convert.NewBlobBytes), mib(r.Image.Convert.BootstrapLayer),
		r.Program, len(r.Image.Startup), mib(r.Image.StartupBytes), r.rounds(), target)
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	b.WriteString("| link | overlayfs: pull / first output | RAFS: pull / first output (ratio, met) | RAFS + startup prefetch: pull / first output (ratio, met) | over the link: overlayfs / RAFS / + prefetch |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %s | %.2f s / %.2f s | %.2f s / %.2f s (%.3f, %s) | %.2f s / %.2f s (%.3f, %s) | %s / %s / %s |\n", linkName(x.Link),
			x.OverlayPull, x.Overlay, x.RAFSPull, x.RAFS, x.Ratio, yes(x.Met), x.StartupPull, x.Startup, x.StartupRatio, yes(x.StartupMet),
			mib(int64(x.OverlayBytes)), mib(int64(x.RAFSBytes)), mib(int64(x.StartupBytes)))
	}
	b.WriteString("\nEvery run:\n\n| run | pull | first output | over the link | load average at its start |\n| --- | --- | --- | --- | --- |\n")
	for _, res := range r.Runs {
		fmt.Fprintf(&b, "| %s | %.2f s | %.2f s | %s | %s |\n", res.Name, res.Pull, res.FirstOutput, mib(res.LinkBytes), res.Load)
	}
	return b.String()
}

func (r *report) rounds() int {
	n := 0
	for _, res := range r.Runs {
		n = max(n, res.Round)
	}
	return n
}

// write writes OUT/snapshotter.json and OUT/snapshotter.md.
func (r *report) write(out string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "snapshotter.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	md := r.markdown()
	if err := os.WriteFile(filepath.Join(out, "snapshotter.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(md)
	return nil
}
