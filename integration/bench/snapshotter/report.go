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
	// RAFS and Overlay are median seconds from the start of the pull to
	// the first output; the Pull fields the pull alone.
	RAFS        float64 `json:"rafs_first_output_seconds"`
	Overlay     float64 `json:"overlay_first_output_seconds"`
	RAFSPull    float64 `json:"rafs_pull_seconds"`
	OverlayPull float64 `json:"overlay_pull_seconds"`
	// Ratio is RAFS over Overlay, each a median; Met says whether it is
	// within target.
	Ratio float64 `json:"ratio"`
	Met   bool    `json:"met"`
	// Bytes over the link, medians.
	RAFSBytes    float64 `json:"rafs_link_bytes"`
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
		x.RAFS = pick(modeRAFS, func(r *runResult) float64 { return r.FirstOutput })
		x.Overlay = pick(modeOverlay, func(r *runResult) float64 { return r.FirstOutput })
		x.RAFSPull = pick(modeRAFS, func(r *runResult) float64 { return r.Pull })
		x.OverlayPull = pick(modeOverlay, func(r *runResult) float64 { return r.Pull })
		x.RAFSBytes = pick(modeRAFS, func(r *runResult) float64 { return float64(r.LinkBytes) })
		x.OverlayBytes = pick(modeOverlay, func(r *runResult) float64 { return float64(r.LinkBytes) })
		if x.Overlay > 0 {
			x.Ratio = x.RAFS / x.Overlay
		}
		x.Met = x.Ratio > 0 && x.Ratio <= target
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
		"`damselfly snapshotter` (one lazy mount, chunks fetched on read); overlayfs: the plain tag, downloaded and unpacked in full. "+
		"Medians of %d rounds, the two modes alternating within each (which goes first swaps each round). Target: RAFS ≤ %.1fx overlayfs.\n\n",
		mib(r.Image.PlainBytes), r.Image.Convert.Stats.Files, mib(r.Image.Convert.NewBlobBytes), mib(r.Image.Convert.BootstrapLayer),
		r.Program, r.rounds(), target)
	b.WriteString("| link | RAFS: pull / first output | overlayfs: pull / first output | ratio (first output) | target met | over the link: RAFS / overlayfs |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, x := range r.Rows {
		met := "no"
		if x.Met {
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %.2f s / %.2f s | %.2f s / %.2f s | %.3f | %s | %s / %s |\n", linkName(x.Link),
			x.RAFSPull, x.RAFS, x.OverlayPull, x.Overlay, x.Ratio, met, mib(int64(x.RAFSBytes)), mib(int64(x.OverlayBytes)))
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
