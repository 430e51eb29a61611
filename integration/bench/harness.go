package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"damselfly/integration/harness"
	"damselfly/rafs/convert"
)

// Config configures Run.
type Config struct {
	// Root is the repository root; Out the cache and results directory
	// (integration/bench/out below Root by default).
	Root, Out string
	// Runs is the number of alternating damselfly/eStargz runs per image.
	Runs int
	// BigRuns and BigBaselineRuns are the damselfly and eStargz runs on
	// the big image (eStargz takes minutes per run there).
	BigRuns, BigBaselineRuns int
	// SampleBytes and BigBytes size the synthetic images; 0 skips one.
	SampleBytes, BigBytes int64
	// Debian includes the Debian image and its dedup pair.
	Debian bool
	// CPUProfile profiles an in-process conversion of the Debian image
	// into Out/cpu-debian.pprof.
	CPUProfile bool
	// QuietWait is how long to wait before each run for the rest of the
	// machine to use less than a quarter of a core; 0 does not wait.
	QuietWait time.Duration
	// Nice is the nice value the measured converters run at; negative
	// values (root only) shield them from other work on a shared machine.
	Nice int
	Log  io.Writer
}

// ImageResult holds every run on one image.
type ImageResult struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	// From the last damselfly run (all runs give the same output).
	Convert      *convert.Result `json:"convert"`
	EStargz      *EStargzResult  `json:"estargz,omitempty"`
	Damselfly    []Sample        `json:"damselfly_runs"`
	Baseline     []Sample        `json:"estargz_runs"`
	RSSTarget    bool            `json:"rss_target"`
	DamselflyCmd string          `json:"damselfly_command"`
	EStargzCmd   string          `json:"estargz_command"`
}

// benchImage is one image to measure.
type benchImage struct {
	name, layout, tag  string
	runs, baselineRuns int
	rssTarget          bool
	damselfly, estargz string // binaries
	meter              Meter
	quietWait          time.Duration
	work               string
	relRoot            func(string) string
}

// Run builds the tools and images, measures them and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	p := Progress{W: cfg.Log}
	rep := &Report{Started: time.Now().UTC().Format(time.RFC3339), Environment: map[string]string{}}
	rep.Machine = fmt.Sprintf("%d cores (GOMAXPROCS %d), %s/%s, %s, converters at nice %d after waiting up to %s for a quiet machine", runtime.NumCPU(), runtime.GOMAXPROCS(0),
		runtime.GOOS, runtime.GOARCH, runtime.Version(), cfg.Nice, cfg.QuietWait)
	rel := func(path string) string {
		if r, err := filepath.Rel(cfg.Root, path); err == nil && !filepath.IsAbs(r) && r[0] != '.' {
			return r
		}
		return path
	}
	bin := filepath.Join(cfg.Out, "bin")
	damselfly, estargzBin := filepath.Join(bin, "damselfly"), filepath.Join(bin, "estargz")
	meter := Meter{Wrapper: filepath.Join(bin, "rusage"), Nice: cfg.Nice}
	p.Printf("building %s, %s and %s", rel(damselfly), rel(estargzBin), rel(meter.Wrapper))
	for _, b := range [][2]string{{damselfly, "./cmd/damselfly"}, {estargzBin, "./integration/bench/estargz"}, {meter.Wrapper, "./integration/bench/rusage"}} {
		if err := harness.Build(ctx, cfg.Root, b[0], b[1]); err != nil {
			return nil, err
		}
	}
	if v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/containerd/stargz-snapshotter/estargz").Output(); err == nil {
		rep.Environment["estargz"] = string(trimNL(v))
	}

	var imgs []benchImage
	mk := func(name, layout, tag string, runs, baselineRuns int, rss bool) benchImage {
		return benchImage{name: name, layout: layout, tag: tag, runs: runs, baselineRuns: baselineRuns, rssTarget: rss,
			damselfly: damselfly, estargz: estargzBin, meter: meter, quietWait: cfg.QuietWait, work: filepath.Join(cfg.Out, "work", name), relRoot: rel}
	}
	var debianDir string
	if cfg.Debian {
		p.Printf("preparing the Debian image (first run downloads packages; later runs reuse %s)", rel(filepath.Join(cfg.Out, "debian")))
		d, err := DebianLayout(ctx, cfg.Out, prefixed{cfg.Log})
		if err != nil {
			return nil, err
		}
		debianDir = d
		imgs = append(imgs, mk("debian-v1", d, "v1", cfg.Runs, cfg.Runs, false))
	}
	if cfg.SampleBytes > 0 {
		name := fmt.Sprintf("sample-%s", sizeName(cfg.SampleBytes))
		d, err := SampleLayout(ctx, cfg.Out, name, roundScale(ScaleFor(cfg.SampleBytes)), prefixed{cfg.Log})
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, mk(name, d, "sample", cfg.Runs, cfg.Runs, false))
	}
	if cfg.BigBytes > 0 {
		name := fmt.Sprintf("sample-%s", sizeName(cfg.BigBytes))
		d, err := SampleLayout(ctx, cfg.Out, name, roundScale(ScaleFor(cfg.BigBytes)), prefixed{cfg.Log})
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, mk(name, d, "sample", cfg.BigRuns, cfg.BigBaselineRuns, true))
	}

	for _, bi := range imgs {
		ir, err := bi.measure(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bi.name, err)
		}
		rep.Images = append(rep.Images, *ir)
		rep.Rows = append(rep.Rows, imageRows(ir)...)
		if n := noise(ir); n != "" {
			rep.Notes = append(rep.Notes, n)
		}
	}

	if cfg.Debian {
		dr, err := runDedup(ctx, p, "debian", debianDir, "v1", "v2", damselfly, cfg.Out, rel)
		if err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		rep.Dedup = append(rep.Dedup, *dr)
		rep.Rows = append(rep.Rows, dedupRows(dr)...)
		if dr.ConvertError != "" {
			rep.Notes = append(rep.Notes, "dedup debian: `damselfly convert --chunk-dict` failed: "+dr.ConvertError)
		}
	}
	cp, err := CorpusPairLayout(ctx, cfg.Out)
	if err != nil {
		return nil, err
	}
	dr, err := runDedup(ctx, p, "corpus", cp, "base-v1", "base-v2", damselfly, cfg.Out, rel)
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	rep.Dedup = append(rep.Dedup, *dr)
	rep.Rows = append(rep.Rows, dedupRows(dr)...)

	if cfg.CPUProfile && cfg.Debian {
		prof := filepath.Join(cfg.Out, "cpu-debian.pprof")
		p.Printf("profiling an in-process conversion of debian v1 into %s", rel(prof))
		if err := ProfileConvert(ctx, "oci:"+debianDir+":v1", filepath.Join(cfg.Out, "work", "profile"), prof); err != nil {
			return nil, err
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("CPU profile of converting debian v1: `go tool pprof -top %s`", rel(prof)))
	}
	return rep, nil
}

// measure runs the image's alternating damselfly and eStargz conversions.
func (bi benchImage) measure(ctx context.Context, p Progress) (*ImageResult, error) {
	src := "oci:" + bi.layout + ":" + bi.tag
	rafsDir, esgzDir := filepath.Join(bi.work, "rafs"), filepath.Join(bi.work, "estargz")
	dArgv := []string{bi.damselfly, "convert", src, "oci:" + rafsDir + ":rafs", "--json"}
	eArgv := []string{bi.estargz, src, esgzDir}
	ir := &ImageResult{Name: bi.name, Source: src, RSSTarget: bi.rssTarget,
		DamselflyCmd: bi.relRoot(bi.damselfly) + " convert oci:" + bi.relRoot(bi.layout) + ":" + bi.tag + " oci:/tmp/rafs-out:rafs --json",
		EStargzCmd:   bi.relRoot(bi.estargz) + " oci:" + bi.relRoot(bi.layout) + ":" + bi.tag + " /tmp/estargz-out"}
	p.Printf("%s: warming the page cache with the source layers", bi.name)
	if err := WarmLayout(bi.layout); err != nil {
		return nil, err
	}
	defer os.RemoveAll(bi.work)
	for r := 0; r < max(bi.runs, bi.baselineRuns); r++ {
		order := []string{"damselfly", "estargz"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, which := range order {
			if which == "damselfly" && r >= bi.runs || which == "estargz" && r >= bi.baselineRuns {
				continue
			}
			if err := os.RemoveAll(bi.work); err != nil {
				return nil, err
			}
			if err := os.MkdirAll(bi.work, 0o755); err != nil {
				return nil, err
			}
			syscall.Sync() // earlier runs' dirty pages must not be written back during this one
			var busy float64
			var waited time.Duration
			if bi.quietWait > 0 {
				busy, waited = WaitQuiet(ctx, 0.25, bi.quietWait)
			}
			argv := dArgv
			if which == "estargz" {
				argv = eArgv
			}
			s, out, err := bi.meter.Measure(ctx, argv)
			if err != nil {
				return nil, err
			}
			s.Waited, s.BusyBefore = waited.Seconds(), busy
			if which == "damselfly" {
				var res convert.Result
				if err := json.Unmarshal(out, &res); err != nil {
					return nil, fmt.Errorf("damselfly convert --json output: %w", err)
				}
				ir.Convert, ir.Damselfly = &res, append(ir.Damselfly, s)
				p.Printf("%s: run %d damselfly %6.2fs (%.0f MB/s), CPU %.1fs, peak RSS %d MiB; others used %.1f CPU-s%s", bi.name, r+1, s.Seconds,
					float64(res.Stats.ContentBytes)/1e6/s.Seconds, s.CPU(), s.MaxRSS>>20, s.OtherCPU, waitNote(s))
			} else {
				var res EStargzResult
				if err := json.Unmarshal(out, &res); err != nil {
					return nil, fmt.Errorf("estargz output: %w", err)
				}
				ir.EStargz, ir.Baseline = &res, append(ir.Baseline, s)
				p.Printf("%s: run %d eStargz   %6.2fs, CPU %.1fs, peak RSS %d MiB; others used %.1f CPU-s%s", bi.name, r+1, s.Seconds,
					s.CPU(), s.MaxRSS>>20, s.OtherCPU, waitNote(s))
			}
		}
	}
	return ir, nil
}

// noise describes how busy the rest of the machine was during the runs
// on ir, if other processes took more than a quarter of a core.
func noise(ir *ImageResult) string {
	var other, wall float64
	for _, s := range append(slices.Clone(ir.Damselfly), ir.Baseline...) {
		other += s.OtherCPU
		wall += s.Seconds
	}
	if wall == 0 || other/wall < 0.25 {
		return ""
	}
	return fmt.Sprintf("%s: other processes used %.2f cores on average during the runs (of %d); the wall times are inflated accordingly, CPU times much less",
		ir.Name, other/wall, runtime.NumCPU())
}

func waitNote(s Sample) string {
	if s.Waited < 1 {
		return ""
	}
	return fmt.Sprintf(" (waited %.0fs for quiet, then %.2f cores busy)", s.Waited, s.BusyBefore)
}

// prefixed writes builder progress through the harness's log.
type prefixed struct{ w io.Writer }

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, "bench: "); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

func sizeName(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%dg", (n+1<<29)>>30)
	}
	return fmt.Sprintf("%dm", (n+1<<19)>>20)
}

// roundScale keeps two decimals, so a size maps to a stable cache stamp.
func roundScale(s float64) float64 { return float64(int(s*100+0.5)) / 100 }

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
