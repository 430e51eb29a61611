// Command mount is the mount daemon benchmark harness (`make
// bench-mount`). It serves a real Debian Python/NumPy/SciPy image, a
// synthetic sample image and synthetic images of 1k to 200k small files
// from a local docker-registry behind a shaping proxy (package shaper:
// bandwidth and latency of a real link), and measures, side by side in
// one run and as medians of several runs:
//
//   - time to mount-ready, a startup-like read and a cold read of every
//     file with `damselfly mount`, against a full pull and unpack of the
//     plain image (`skopeo copy` through the same proxy, `umoci unpack`);
//   - a warm read of every file (node cache full, page cache dropped)
//     against reading the unpacked tree on local disk;
//   - the mount daemon's RSS with 200k files mounted, and mount-ready
//     time against file count.
//
// It prints a markdown table and writes OUT/mount.md and OUT/mount.json.
// It needs root (FUSE, chroot, drop_caches), skopeo, umoci,
// docker-registry and fuse3; strace and perf are optional. Everything
// listens on 127.0.0.1, and every process it starts is stopped before it
// returns. The registry and the daemon processes are integration/harness,
// shared with the cluster tests and the soak.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// options are the harness's flags.
type options struct {
	out         string
	runs        int
	quick       bool
	profiles    []profile
	images      map[string]bool
	rows        map[string]bool
	cold        []coldConfig
	sampleBytes int64
	fileCounts  []int
	workers     int
	perf        bool
	timeout     time.Duration
	keep        bool
}

func main() {
	var o options
	var profiles, images, rows, cold, files, serve string
	flag.StringVar(&o.out, "out", "", "cache and results directory (default integration/bench/out in the repository)")
	flag.IntVar(&o.runs, "runs", 3, "runs of every measurement; rows show medians")
	flag.BoolVar(&o.quick, "quick", false, "one run, the 1g profile only, the default cold config only, 1k and 50k-file images (a few minutes)")
	flag.StringVar(&profiles, "profiles", "1g,200m", "links to emulate: 1g (1 Gbit/s, 2ms RTT), 200m (200 Mbit/s, 20ms RTT), or RATE@RTT such as 500m@10ms")
	flag.StringVar(&images, "images", "debian,sample,files", "images to measure: debian, sample, files")
	flag.StringVar(&rows, "rows", "ready,startup,python,cold,warm,rss", "measurements: ready, startup, python, cold, warm, rss")
	flag.StringVar(&cold, "cold-configs", "1m,4m,1m+all,4m+all", "cold-read mount configs: amplify_io (1m, 4m, ...), +all for prefetch_all; the first is the default")
	flag.Int64Var(&o.sampleBytes, "sample-bytes", 256<<20, "content of the synthetic sample image")
	flag.StringVar(&files, "files", "1000,50000,200000", "file counts of the many-small-files images")
	flag.IntVar(&o.workers, "workers", 4, "parallel readers for reading every file (mount and local disk alike)")
	flag.BoolVar(&o.perf, "perf", true, "after the runs, record the mount daemon with perf (if installed) during one extra cold read of the first image (OUT/mount-perf.txt)")
	flag.DurationVar(&o.timeout, "timeout", 45*time.Minute, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (registry storage, caches, unpacked trees)")
	flag.StringVar(&serve, "serve-shaper", "", "only run a shaping proxy to this upstream host:port with the first -profiles link, until interrupted")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := func() error {
		var err error
		if o.profiles, err = parseProfiles(profiles); err != nil {
			return err
		}
		if serve != "" {
			return serveShaper(ctx, serve, o.profiles[0])
		}
		if o.cold, err = parseColdConfigs(cold); err != nil {
			return err
		}
		if o.fileCounts, err = parseInts(files); err != nil {
			return err
		}
		o.images, o.rows = set(images), set(rows)
		if o.quick {
			o.runs = 1
			o.profiles = o.profiles[:1]
			o.cold = o.cold[:1]
			o.fileCounts = []int{1000, 50000}
		}
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		return run(ctx, o)
	}()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-mount:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if o.out == "" {
		o.out = filepath.Join(root, "integration", "bench", "out")
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	h, err := newHarness(ctx, root, o)
	if err != nil {
		return err
	}
	defer h.close()
	rep, err := h.measure(ctx)
	if err != nil {
		return err
	}
	if err := rep.write(o.out); err != nil {
		return err
	}
	fmt.Print(rep.markdown())
	h.logf("wrote %s and %s", filepath.Join(o.out, "mount.md"), filepath.Join(o.out, "mount.json"))
	return nil
}

func set(list string) map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			m[s] = true
		}
	}
	return m
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
