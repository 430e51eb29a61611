// Command snapshotter measures what issue 22 asks of `damselfly
// snapshotter` (`make bench-snapshotter`): the time from `pull` to a
// container's first output, for the Debian image with Python and NumPy
// (integration/bench/debian.go), pulled lazily as RAFS through the
// snapshotter against the same image pulled in full with containerd's
// overlayfs snapshotter, both over the same shaped link to a
// docker-registry origin (integration/bench/shaper: 200 Mbit/s with 20 ms
// RTT and 1 Gbit/s with 2 ms, as integration/bench/mount). Target: the
// lazy start within 0.2x of the full pull's. The RAFS image is measured
// twice: converted with the defaults, and converted the way a user tunes
// it for start-up (`convert --prefetch-patterns` with the files the
// import opens, found with strace in an unpacked copy, as
// integration/bench/mount's startup rows do), which the mount daemon
// then prefetches from a blob of their own.
//
// Every run is cold: a containerd (Debian's, its own root, state and
// socket), a snapshotter and a node cache of their own, removed after
// the run. The client is containerd's v2 client library pulling as CRI
// pulls (the remote-snapshot labels of snapshotters.AppendInfoHandlerWrapper,
// the image's own media types), then creating the container and its task
// and starting it; the clock stops at the first line the container
// prints: `import numpy, scipy` done (bench.PythonImport, the startup of
// integration/bench/mount's rows). The modes run one after another in
// each round, in an order that rotates, so all see the same machine.
//
// It writes OUT/snapshotter.json and OUT/snapshotter.md, which `make
// bench-results` quotes in RESULTS.md. It needs root, containerd, runc,
// docker-registry, skopeo, umoci and strace.
//
// Files: main.go (flags, setup), run.go (one run), report.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"damselfly/integration/bench"
	"damselfly/integration/bench/shaper"
	"damselfly/integration/harness"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// links are the profiles issue 22 reports, as integration/bench/mount
// names them.
var links = map[string]shaper.Config{
	"200m": {Bandwidth: 200e6, RTT: 20 * time.Millisecond},
	"1g":   {Bandwidth: 1e9, RTT: 2 * time.Millisecond},
}

// Modes of a run.
const (
	modeRAFS    = "rafs"    // the RAFS tag through damselfly snapshotter
	modeStartup = "startup" // the same, converted with the startup set as prefetch patterns
	modeOverlay = "overlay" // the plain tag, overlayfs, full pull
)

// modeTags are the tags and snapshotters of the modes.
var modeTags = map[string]struct{ tag, snapshotter string }{
	modeRAFS:    {"rafs", "damselfly"},
	modeStartup: {"rafs-startup", "damselfly"},
	modeOverlay: {"plain", "overlayfs"},
}

type options struct {
	out        string
	links      []string
	modes      []string
	runs       int
	cmd        string
	runTimeout time.Duration
	keep       bool
	mountExtra string
	convFlags  []string
}

func main() {
	var o options
	var linkList string
	flag.StringVar(&o.out, "out", "", "results and image cache directory (default integration/bench/out in the repository)")
	flag.StringVar(&linkList, "links", "200m,1g", "links to measure: 200m (200 Mbit/s, 20ms RTT) and/or 1g (1 Gbit/s, 2ms RTT)")
	modeList := flag.String("modes", "rafs,startup,overlay", "modes to measure: rafs (default conversion), startup (startup set as prefetch patterns), overlay (full pull)")
	flag.IntVar(&o.runs, "runs", 3, "rounds; each runs both modes on each link, rows show medians")
	flag.StringVar(&o.cmd, "cmd", bench.PythonImport+"; print('imported', flush=True)", "Python program the container runs (environment bench.PythonEnv); its first line stops the clock")
	flag.DurationVar(&o.runTimeout, "run-timeout", 10*time.Minute, "bound on one run")
	flag.StringVar(&o.mountExtra, "mount-yaml", "", "YAML appended to the mount daemons' configuration (a study of tunables; the reported rows use the defaults)")
	convFlags := flag.String("convert-flags", "", "flags added to both conversions, space-separated (a study; the reported rows use the defaults)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (registry storage, logs)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := func() error {
		for _, l := range strings.Split(linkList, ",") {
			if _, ok := links[l]; !ok {
				return fmt.Errorf("-links: unknown link %q (want 200m or 1g)", l)
			}
			o.links = append(o.links, l)
		}
		for _, m := range strings.Split(*modeList, ",") {
			if _, ok := modeTags[m]; !ok {
				return fmt.Errorf("-modes: unknown mode %q (want rafs, startup or overlay)", m)
			}
			o.modes = append(o.modes, m)
		}
		o.convFlags = strings.Fields(*convFlags)
		if o.runs < 1 {
			return fmt.Errorf("-runs %d: want at least 1", o.runs)
		}
		return runMain(ctx, o)
	}()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-snapshotter:", err)
		os.Exit(1)
	}
}

// rig is what every run shares.
type rig struct {
	o          options
	root, work string
	bin        string
	reg        *harness.Registry
	env        map[string]string
	image      imageInfo
}

// imageInfo describes the measured image.
type imageInfo struct {
	Source      string          `json:"source"`
	Repo        string          `json:"repo"`
	PlainBytes  int64           `json:"plain_bytes"` // the gzip layers
	Convert     *convert.Result `json:"convert"`
	ConvertTook float64         `json:"convert_seconds"`
	// ConvertStartup is the conversion with the startup set (Startup,
	// StartupBytes of file data) as prefetch patterns.
	ConvertStartup *convert.Result `json:"convert_startup"`
	Startup        []string        `json:"startup"`
	StartupBytes   int64           `json:"startup_bytes"`
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-snapshotter: "+format+"\n", args...)
}

func runMain(ctx context.Context, o options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("run as root: containerd, overlayfs and FUSE need it")
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "docker-registry", "skopeo", "fusermount3", "umoci", "strace", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is required (make deps installs the Debian packages): %w", tool, err)
		}
	}
	h := &rig{o: o, env: map[string]string{}}
	if h.root, err = moduleRoot(); err != nil {
		return err
	}
	if h.o.out == "" {
		h.o.out = filepath.Join(h.root, "integration", "bench", "out")
	}
	h.work = filepath.Join(h.o.out, "snapshotter", "work")
	if err := os.RemoveAll(h.work); err != nil {
		return err
	}
	if err := os.MkdirAll(h.work, 0o755); err != nil {
		return err
	}
	defer func() {
		if h.reg != nil {
			if serr := h.reg.Stop(); serr != nil {
				logf("%v", serr)
			}
		}
		if !o.keep {
			os.RemoveAll(h.work)
		}
	}()
	h.bin = filepath.Join(h.o.out, "snapshotter", "bin", "damselfly")
	logf("building %s", h.bin)
	if err := harness.Build(ctx, h.root, h.bin, "./cmd/damselfly"); err != nil {
		return err
	}
	h.describe(ctx)
	if h.reg, err = harness.StartRegistry(ctx, harness.RegistryConfig{Dir: filepath.Join(h.work, "registry")}); err != nil {
		return err
	}
	if err := h.push(ctx); err != nil {
		return err
	}

	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Command: strings.Join(append([]string{"go run ./integration/bench/snapshotter"}, os.Args[1:]...), " "), Env: h.env,
		Image: h.image, Program: o.cmd}
	for r := 1; r <= o.runs; r++ {
		for _, l := range o.links {
			// The order rotates each round, so no mode always runs on a
			// machine another just warmed or loaded.
			all := o.modes
			k := (r - 1) % len(all)
			modes := append(all[k:len(all):len(all)], all[:k]...)
			for _, m := range modes {
				load := loadavg()
				logf("round %d/%d, %s, %s (load average %s)", r, o.runs, l, m, load)
				res, err := h.run(ctx, fmt.Sprintf("r%d-%s-%s", r, l, m), l, m)
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", r, l, m, err)
				}
				logf("  pull %.2fs, first output %.2fs, %s over the link: %q", res.Pull, res.FirstOutput, mib(res.LinkBytes), res.Output)
				res.Round, res.Load = r, load
				rep.Runs = append(rep.Runs, res)
			}
		}
	}
	rep.summarize(o.links)
	return rep.write(h.o.out)
}

// push puts the Debian image v1 into the registry twice: as it is
// (tag plain, skopeo copy) and converted by `damselfly convert` with
// its defaults (tag rafs, the RAFS manifest alone).
func (h *rig) push(ctx context.Context) error {
	logf("preparing the Debian image (the first run downloads packages into %s)", filepath.Join(h.o.out, "debian"))
	dir, err := bench.DebianLayout(ctx, h.o.out, logWriter{})
	if err != nil {
		return err
	}
	h.image.Source = "oci:" + dir + ":v1"
	h.image.Repo = "bench/debian"
	dst := "docker://" + h.reg.Host() + "/" + h.image.Repo
	if out, err := exec.CommandContext(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", h.image.Source, dst+":plain").CombinedOutput(); err != nil {
		return fmt.Errorf("skopeo copy: %w: %s", err, out)
	}
	start := time.Now()
	if h.image.Convert, err = harness.Convert(ctx, h.bin, h.image.Source, dst+":rafs", h.o.convFlags...); err != nil {
		return err
	}
	h.image.ConvertTook = time.Since(start).Seconds()
	if h.image.PlainBytes, err = plainBytes(dir); err != nil {
		return err
	}
	if err := h.pushStartup(ctx, dir, dst); err != nil {
		return fmt.Errorf("startup conversion: %w", err)
	}
	logf("image: %s of gzip layers; RAFS %d files, %s of blobs, %s bootstrap layer (converted in %.1fs)",
		mib(h.image.PlainBytes), h.image.Convert.Stats.Files, mib(h.image.Convert.NewBlobBytes), mib(h.image.Convert.BootstrapLayer), h.image.ConvertTook)
	return nil
}

// pushStartup finds the files `python3 -c bench.PythonImport` opens
// (strace, chrooted in an umoci-unpacked copy) and converts the image
// again with them as prefetch patterns, to dst:rafs-startup.
func (h *rig) pushStartup(ctx context.Context, layout, dst string) error {
	native, err := rafstest.UmociUnpack(ctx, layout, "v1", filepath.Join(h.work, "native"))
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Join(h.work, "native"))
	img, err := image.Open(ctx, dst+":rafs", image.Options{})
	if err != nil {
		return err
	}
	defer img.Close()
	if h.image.Startup, err = bench.PythonStartupSet(ctx, native, img); err != nil {
		return err
	}
	var list strings.Builder
	for _, p := range h.image.Startup {
		if info, err := os.Lstat(filepath.Join(native, p)); err == nil {
			h.image.StartupBytes += info.Size()
		}
		list.WriteString("/" + strings.TrimPrefix(p, "/") + "\n")
	}
	patterns := filepath.Join(h.work, "startup.txt")
	if err := os.WriteFile(patterns, []byte(list.String()), 0o644); err != nil {
		return err
	}
	if h.image.ConvertStartup, err = harness.Convert(ctx, h.bin, h.image.Source, dst+":rafs-startup", append([]string{"--prefetch-patterns", patterns}, h.o.convFlags...)...); err != nil {
		return err
	}
	logf("startup set: %d files, %s; converted with it as prefetch patterns (%d chunks in the prefetch blob)",
		len(h.image.Startup), mib(h.image.StartupBytes), h.image.ConvertStartup.Stats.PrefetchChunks)
	return nil
}

// describe records the machine and tool versions.
func (h *rig) describe(ctx context.Context) {
	h.env["machine"] = fmt.Sprintf("%d cores, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	for k, argv := range map[string][]string{
		"kernel": {"uname", "-r"}, "containerd": {"containerd", "--version"}, "runc": {"runc", "--version"},
		"commit": {"git", "-C", h.root, "describe", "--always", "--dirty"},
	} {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output(); err == nil {
			h.env[k] = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
		}
	}
	h.env["loadavg_before"] = loadavg()
}

// loadavg is the 1, 5 and 15 minute load averages: the machine is
// shared, and a figure means little without them.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// logWriter passes the image builder's progress to stderr.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		logf("%s", l)
	}
	return len(p), nil
}

var _ io.Writer = logWriter{}

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

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
