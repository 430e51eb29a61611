// Command pulls measures plain pulls through the peers' mirrors deployed
// the way users deploy (issue 21; `make bench-pulls`): a docker-registry
// origin holding an ordinary gzip OCI image, a `damselfly scheduler`,
// and per node a `damselfly peer` whose mirror serves the origin as its
// default registry, each in a network namespace of its own made by
// integration/harness (Net), every link capped by the kernel (tc). In
// every run all nodes start `skopeo copy` from their own mirror at the
// same moment, and it records per node the completion time against the
// link floor (image bytes over the link rate), what the origin sent,
// and CPU-seconds of the peers, skopeo, the scheduler and the registry.
// P2P (peers with a scheduler) and no P2P (the same peers without one)
// alternate in each round.
//
// It is a sibling of integration/bench/deployed, which reads RAFS images
// through FUSE mounts; the two share the harness and its link and CPU
// counters. It writes OUT/pulls.json and OUT/pulls.md, which `make
// bench-results` quotes in RESULTS.md. It needs root, docker-registry,
// skopeo, iproute2 and nsenter (and, for the Debian layers, apt-get).
//
// Files: image.go (the image, its push, the check of a pull), cluster.go
// (namespaces and daemons), run.go (one run), stats.go (floor,
// quantiles), report.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"damselfly/integration/harness"
)

type options struct {
	out         string
	nodes       []int
	rate        int64
	runs        int
	modes       []string
	extraLayers int
	extraMiB    int
	dest        string
	runTimeout  time.Duration
	timeout     time.Duration
	keep        bool
	bin         string
}

func main() {
	var o options
	var nodes, rate, mode string
	flag.StringVar(&o.out, "out", "", "results and image cache directory (default integration/bench/out in the repository)")
	flag.StringVar(&nodes, "nodes", "1,4,8", "node counts to measure")
	flag.StringVar(&rate, "rate", "200m", "every link's cap each way, bit/s with an optional k, m or g suffix")
	flag.IntVar(&o.runs, "runs", 1, "runs of each (nodes, mode); rows show medians")
	flag.StringVar(&mode, "mode", "both", "p2p, origin (the same peers without a scheduler) or both")
	flag.IntVar(&o.extraLayers, "extra-layers", 2, "pseudo-random gzip layers added to the Debian image's")
	flag.IntVar(&o.extraMiB, "extra-mib", 200, "size of each extra layer, MiB")
	flag.StringVar(&o.dest, "dest", destOCI, "skopeo's destination: oci (a layout) or dir")
	flag.DurationVar(&o.runTimeout, "run-timeout", 15*time.Minute, "bound on one run, start to stop")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Hour, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (registry storage, caches, logs)")
	flag.StringVar(&o.bin, "bin", "", "run this damselfly binary (another commit's, for side-by-side runs) instead of building ./cmd/damselfly")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := func() error {
		var err error
		if o.nodes, err = parseInts(nodes); err != nil {
			return err
		}
		if o.rate, err = parseRate(rate); err != nil {
			return err
		}
		switch mode {
		case "both":
			o.modes = []string{modeP2P, modeOrigin}
		case modeP2P, modeOrigin:
			o.modes = []string{mode}
		default:
			return fmt.Errorf("-mode %q: want p2p, origin or both", mode)
		}
		if o.dest != destOCI && o.dest != destDir {
			return fmt.Errorf("-dest %q: want oci or dir", o.dest)
		}
		if o.runs < 1 || o.extraLayers < 0 || o.extraMiB < 1 {
			return errors.New("want at least one run, no negative layer count and extra layers of 1 MiB or more")
		}
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		return run(ctx, o, strings.Join(os.Args[1:], " "))
	}()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-pulls:", err)
		os.Exit(1)
	}
}

// rig is what every run shares.
type rig struct {
	o                  options
	root, bin          string
	work, logs, regDir string
}

func (b *rig) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-pulls: "+format+"\n", args...)
}

func run(ctx context.Context, o options, args string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("run as root: network namespaces need it")
	}
	for _, tool := range []string{"docker-registry", "skopeo", "ip", "tc", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is required (make deps; iproute2, util-linux): %w", tool, err)
		}
	}
	b := &rig{o: o}
	if b.root, err = moduleRoot(); err != nil {
		return err
	}
	if b.o.out == "" {
		b.o.out = filepath.Join(b.root, "integration", "bench", "out")
	}
	if b.o.out, err = filepath.Abs(b.o.out); err != nil {
		return err
	}
	base := filepath.Join(b.o.out, "pulls")
	b.work = filepath.Join(base, "work")
	b.logs = filepath.Join(b.work, "logs")
	b.regDir = filepath.Join(b.work, "registry")
	if err := os.RemoveAll(b.work); err != nil {
		return err
	}
	if err := os.MkdirAll(b.logs, 0o755); err != nil {
		return err
	}
	defer func() {
		if err == nil && !b.o.keep {
			os.RemoveAll(b.work)
		} else {
			b.logf("logs kept in %s", b.work)
		}
	}()
	if b.bin, err = harness.BinaryOrBuild(ctx, b.root, o.bin, filepath.Join(base, "bin", "damselfly"), b.logf); err != nil {
		return err
	}
	pi, err := b.prepareImage(ctx, b.regDir)
	if err != nil {
		return err
	}
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), RateBps: o.rate, Image: pi,
		Command: strings.TrimSpace("go run ./integration/bench/pulls " + args), Env: b.describe(ctx)}
	// The report is written after each node count, so that a long run
	// cut short keeps what it measured (its notes say what is missing).
	for i, n := range o.nodes {
		runs, err := b.measure(ctx, n, pi)
		rep.Runs = append(rep.Runs, runs...)
		rep.Rows = summarize(rep.Runs, pi.Bytes, o.rate)
		rep.Notes = nil
		if err != nil || i < len(o.nodes)-1 {
			rep.Notes = []string{fmt.Sprintf("Incomplete: node counts %v not measured", o.nodes[i+1:])}
			if err != nil {
				rep.Notes[0] = fmt.Sprintf("Incomplete: %d nodes failed (%s); node counts %v not measured", n,
					harness.Esc(strings.SplitN(err.Error(), "\n", 2)[0]), o.nodes[i+1:])
			}
		}
		if len(rep.Runs) > 0 {
			if werr := harness.WriteReport(b.o.out, "pulls", rep, rep.markdown()); werr != nil {
				return errors.Join(err, werr)
			}
		}
		if err != nil {
			return err
		}
	}
	fmt.Print(rep.markdown())
	b.logf("wrote %s and %s", filepath.Join(b.o.out, "pulls.md"), filepath.Join(b.o.out, "pulls.json"))
	return nil
}

// measure makes the Net for n nodes and runs every mode -runs times on
// it, modes alternating within each round so that they see the same
// machine, then deletes the Net.
func (b *rig) measure(ctx context.Context, n int, pi *pullImage) (runs []*runResult, err error) {
	nt, err := newNet(ctx, n, b.o.rate)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := nt.n.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close net %s: %w", nt.n.ID(), cerr))
		}
	}()
	b.logf("%d nodes on net %s at %s", n, nt.n.ID(), rateName(b.o.rate))
	for r := range b.o.runs {
		for _, m := range b.o.modes {
			res, err := b.runOnce(ctx, nt, m, r+1, pi)
			if err != nil {
				return runs, err
			}
			runs = append(runs, res)
		}
	}
	return runs, nil
}

// describe records the machine and tool versions.
func (b *rig) describe(ctx context.Context) map[string]string {
	env := map[string]string{
		"machine": fmt.Sprintf("%d cores, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version()),
		"dest":    b.o.dest,
	}
	for k, argv := range map[string][]string{
		"kernel": {"uname", "-r"}, "docker-registry": {"docker-registry", "--version"}, "skopeo": {"skopeo", "--version"},
		"commit": {"git", "-C", b.root, "describe", "--always", "--dirty"},
	} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if out, err := exec.CommandContext(cctx, argv[0], argv[1:]...).Output(); err == nil {
			env[k] = strings.TrimSpace(string(out))
		}
		cancel()
	}
	return env
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 200 {
			return nil, fmt.Errorf("node count %q: want 1..200", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node count in %q", s)
	}
	return out, nil
}

// parseRate reads bit/s with an optional k, m or g suffix.
func parseRate(s string) (int64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "g"):
		mult, s = 1e9, strings.TrimSuffix(s, "g")
	case strings.HasSuffix(s, "m"):
		mult, s = 1e6, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	return int64(v * mult), nil
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
