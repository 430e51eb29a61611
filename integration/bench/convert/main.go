// Command convert is the converter benchmark harness (`make
// bench-convert`): it converts a real Debian Python/NumPy/SciPy image and
// synthetic images of about 1 GiB and 4 GiB with `damselfly convert` and
// with the eStargz baseline, alternating, as child processes; checks
// chunk-dictionary deduplication on two image pairs; and prints a markdown
// table of medians, also written to OUT/convert.md and OUT/convert.json.
// Progress goes to stderr. Images and .debs are cached in OUT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"damselfly/integration/bench"
)

func main() {
	cfg := bench.Config{Log: os.Stderr}
	flag.StringVar(&cfg.Out, "out", "", "cache and results directory (default integration/bench/out in the repository)")
	flag.IntVar(&cfg.Runs, "runs", 3, "alternating runs of each converter per image")
	flag.IntVar(&cfg.BigRuns, "big-runs", 3, "damselfly runs on the big image")
	flag.IntVar(&cfg.BigBaselineRuns, "big-baseline-runs", 1, "eStargz runs on the big image (about 3 minutes each)")
	flag.Int64Var(&cfg.SampleBytes, "sample-bytes", 1<<30, "content of the synthetic sample image (0 skips it)")
	flag.Int64Var(&cfg.BigBytes, "big-bytes", 4<<30, "content of the big synthetic image for the RSS target (0 skips it)")
	flag.BoolVar(&cfg.Debian, "debian", true, "include the Debian image built from the Debian archive, and its dedup pair")
	flag.BoolVar(&cfg.CPUProfile, "cpuprofile", true, "profile an in-process conversion of the Debian image into OUT/cpu-debian.pprof")
	flag.IntVar(&cfg.Nice, "nice", -10, "nice value of the measured converters (negative needs root; 0 leaves it)")
	flag.DurationVar(&cfg.QuietWait, "quiet-wait", 5*time.Second, "before each run, wait up to this long for other processes to use under a quarter of a core (0: don't)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-convert:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg bench.Config) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cfg.Root = root
	if cfg.Out == "" {
		cfg.Out = filepath.Join(root, "integration", "bench", "out")
	}
	if cfg.Out, err = filepath.Abs(cfg.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.Write(cfg.Out); err != nil {
		return err
	}
	fmt.Print(rep.Markdown())
	fmt.Fprintf(os.Stderr, "bench: wrote %s and %s\n", filepath.Join(cfg.Out, "convert.md"), filepath.Join(cfg.Out, "convert.json"))
	return nil
}

// moduleRoot finds the directory of the damselfly go.mod above the
// working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the damselfly module")
		}
		dir = parent
	}
}
