package main

import (
	"fmt"
	"strings"

	"damselfly/integration/bench"
	"damselfly/integration/harness"
)

// report is everything one harness run measured.
type report struct {
	Started     string            `json:"started"`
	Environment map[string]string `json:"environment"`
	Options     map[string]string `json:"options"`
	Rows        []bench.Row       `json:"rows"`
	Images      []*benchImage     `json:"images"`
	Results     results           `json:"samples"`
	Notes       []string          `json:"notes,omitempty"`
}

func (h *rig) optionsSummary() map[string]string {
	var profiles, cold []string
	for _, p := range h.o.profiles {
		profiles = append(profiles, p.Name+" ("+p.Link.String()+")")
	}
	for _, c := range h.o.cold {
		cold = append(cold, c.Name)
	}
	return map[string]string{
		"runs":         fmt.Sprint(h.o.runs),
		"profiles":     strings.Join(profiles, "; "),
		"cold_configs": strings.Join(cold, "; "),
		"workers":      fmt.Sprint(h.o.workers),
	}
}

// write saves the report as mount.json and mount.md in dir.
func (r *report) write(dir string) error {
	return harness.WriteReport(dir, "mount", r, r.markdown())
}

// markdown renders the table, then how the figures were taken.
func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# damselfly mount benchmarks\n\n%s; started %s; commit %s.\n\n", r.Environment["machine"], r.Started, r.Environment["commit"])
	fmt.Fprintf(&b, "Links: %s. Runs: %s; figures are medians. Cold-read configs: %s.\n\n", r.Options["profiles"], r.Options["runs"], r.Options["cold_configs"])
	b.WriteString("| row | damselfly (median) | baseline (median) | ratio | target | met? | samples | reproduce |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		d := row.DamselflyText
		if d == "" {
			d = cell(row.Damselfly, row.Unit)
		}
		base := row.BaselineText
		if base == "" && row.BaselineName != "" {
			base = cell(row.Baseline, row.Unit) + " (" + row.BaselineName + ")"
		}
		if base == "" {
			base = "—"
		}
		ratio := "—"
		if row.Ratio != 0 {
			ratio = fmt.Sprintf("%.3f", row.Ratio)
			if row.RatioNote != "" {
				ratio += " (" + row.RatioNote + ")"
			}
		}
		m := "report"
		if row.Met != nil {
			m = map[bool]string{true: "yes", false: "**no**"}[*row.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | `%s` |\n", harness.Esc(row.What), harness.Esc(d), harness.Esc(base), harness.Esc(ratio),
			harness.Esc(row.Target), m, row.Runs, strings.ReplaceAll(row.Command, "|", `\|`))
	}
	b.WriteString("\n## How\n\n")
	for _, n := range methodNotes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	b.WriteString("\n## Images\n\n")
	for _, bi := range r.Images {
		c := bi.Convert
		fmt.Fprintf(&b, "- %s (`%s`): %d files, %s of content; RAFS blobs %s, bootstrap %s (%s zstd layer); source gzip layers %s",
			bi.Name, bi.Source, c.Stats.Files, mib(int64(c.Stats.ContentBytes)), mib(c.NewBlobBytes), mib(c.BootstrapBytes),
			mib(c.BootstrapLayer), mib(c.SourceLayers))
		if len(bi.Startup) > 0 {
			fmt.Fprintf(&b, "; startup set %d files, %s: %s", len(bi.Startup), mib(bi.StartupBytes), bi.StartupFrom)
		}
		b.WriteString(".\n")
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// methodNotes say how every figure is taken.
var methodNotes = []string{
	"The registry is a local `docker-registry`; every pull and every mount reaches it through the shaping proxy (integration/bench/shaper: one token bucket per direction shared by all connections, RTT/2 added each way, one more RTT before a connection's first request). The mount's backend.host is the proxy.",
	"Baseline: `skopeo copy docker://PROXY/bench/IMAGE:plain oci:DIR:TAG` then `umoci unpack --image DIR:TAG BUNDLE`, wall time of both, page cache dropped first (`sync; echo 3 > /proc/sys/vm/drop_caches`).",
	"Mount rows are timed from the start of the `damselfly mount` process, page cache dropped and node cache empty first. Mount-ready: the mountpoint is the daemon's mount (FUSE; EROFS for a kernel image) that answers statfs and lists its root (medians over every cold start of that image and link). Startup: then the startup set is read whole, one file after the other. Cold read: every regular file read whole by 4 goroutines taking files in path order.",
	"Warm read: a new daemon on the node cache a cold read filled, page cache dropped; only the read is timed, by the same 4-goroutine reader that reads the umoci-unpacked tree on local disk (page cache dropped too). Throughput is file bytes per second. With a +kernel cold config (kernel_image on), a mount on the full cache first writes the kernel image (timed apart), then the warm read's mount is the kernel's EROFS mount of it.",
	"Fetched bytes come from the daemon's status; request counts and sizes from the registry's access log (blob GETs, bootstrap included); daemon CPU from /proc/PID/stat over the whole run; RSS from VmRSS and VmHWM in /proc/PID/status.",
}

// cell formats v in unit.
func cell(v float64, unit string) string {
	switch unit {
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "MB/s":
		return fmt.Sprintf("%.0f MB/s", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}
