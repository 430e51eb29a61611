package bench

import (
	"fmt"
	"io"
	"strings"

	"damselfly/integration/harness"
)

// Row is one line of the results table: a damselfly figure beside its
// baseline (eStargz, or the source's gzip layers), their ratio, and the
// target the figure is held to.
type Row struct {
	What      string  `json:"what"`
	Unit      string  `json:"unit"`
	Damselfly float64 `json:"damselfly"`
	// Baseline is 0 and BaselineName empty when the row has none.
	Baseline     float64 `json:"baseline,omitempty"`
	BaselineName string  `json:"baseline_name,omitempty"`
	// Ratio is damselfly/baseline, or baseline/damselfly where RatioNote
	// says so (for times, so that higher is better, like throughput).
	Ratio     float64 `json:"ratio,omitempty"`
	RatioNote string  `json:"ratio_note,omitempty"`
	Target    string  `json:"target"`
	// Met is nil for a figure that is only reported.
	Met  *bool `json:"met"`
	Runs int   `json:"runs,omitempty"` // samples behind a median; 0 for a single measurement
	// Command reproduces the damselfly figure (and, after " ; ", the
	// baseline), from the repository root.
	Command string `json:"command"`
	// Text overrides the formatted damselfly and baseline cells.
	DamselflyText string `json:"damselfly_text,omitempty"`
	BaselineText  string `json:"baseline_text,omitempty"`
}

func met(b bool) *bool { return &b }

// Report is everything one harness run measured.
type Report struct {
	Started     string            `json:"started"`
	Machine     string            `json:"machine"`
	Rows        []Row             `json:"rows"`
	Images      []ImageResult     `json:"images"`
	Dedup       []DedupResult     `json:"dedup"`
	Notes       []string          `json:"notes,omitempty"`
	Environment map[string]string `json:"environment"`
}

// cell formats v in unit.
func cell(v float64, unit string) string {
	switch unit {
	case "MB/s":
		return fmt.Sprintf("%.0f MB/s", v)
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "bytes":
		return humanBytes(v)
	case "MiB":
		return fmt.Sprintf("%.0f MiB", v)
	case "x":
		return fmt.Sprintf("%.2fx", v)
	case "chunks":
		return fmt.Sprintf("%.0f chunks", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

func humanBytes(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}

// Markdown renders the rows as a table.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# damselfly convert benchmarks\n\n%s, started %s. Figures are medians of the runs shown; "+
		"throughput is uncompressed file content per second of wall time of the whole process.\n\n", r.Machine, r.Started)
	b.WriteString("| what | damselfly | baseline | ratio | target | met | runs | reproduce |\n")
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
			ratio = fmt.Sprintf("%.2f", row.Ratio)
			if row.RatioNote != "" {
				ratio += " (" + row.RatioNote + ")"
			}
		}
		m := "report"
		if row.Met != nil {
			m = map[bool]string{true: "yes", false: "**no**"}[*row.Met]
		}
		runs := "1"
		if row.Runs > 0 {
			runs = fmt.Sprint(row.Runs)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", harness.Esc(row.What), harness.Esc(d), harness.Esc(base), harness.Esc(ratio),
			harness.Esc(row.Target), m, runs, "`"+strings.ReplaceAll(row.Command, "|", `\|`)+"`")
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// Write saves the report as convert.json and convert.md in dir.
func (r *Report) Write(dir string) error {
	return harness.WriteReport(dir, "convert", r, r.Markdown())
}

// Progress writes harness progress lines.
type Progress struct{ W io.Writer }

func (p Progress) Printf(format string, args ...any) {
	fmt.Fprintf(p.W, "bench: "+format+"\n", args...)
}
