// Command deployed is the distribution benchmark deployed the way users
// deploy (issue 24; `make bench-deployed`): separate `damselfly
// scheduler`, `damselfly peer` and `damselfly mount` processes and a
// docker-registry origin, each node (its peer and its mount) and the
// origin and the scheduler in a network namespace of its own made by
// integration/harness (Net), every link capped by the kernel (tc). In
// every run all nodes' readers start at once through their FUSE mounts,
// reading every file or a startup subset, and it records per node the
// completion time against the link floor, what the origin sent, and
// CPU-seconds by process (mount daemon, peer, reader; scheduler and
// registry) from /proc. P2P (peers with a scheduler), registry-only
// (the same peers without one, the in-process harness's baseline) and a
// plain pull (skopeo copy of the image's gzip layers from the origin,
// umoci unpack, the same readers on the unpacked tree: what a node
// without damselfly pays) run side by side in each round.
//
// It runs beside the in-process harness (integration/bench/distribution),
// which stays for schedule studies. It writes OUT/deployed.json and
// OUT/deployed.md, which `make bench-results` quotes in RESULTS.md. It
// needs root, /dev/fuse, fuse3, docker-registry, iproute2 and nsenter,
// skopeo and umoci for the pull mode (and for -image debian, apt-get and
// strace).
//
// Files: image.go (the image and what each workload needs), need.go
// (chunk bytes of a file list), cluster.go (namespaces and daemons),
// run.go (one run), reader.go (the reader process: this program with
// -reader-list), stats.go (floor, quantiles), report.go; CPU-seconds from
// /proc and interface counters come from integration/harness.
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
	"slices"
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
	profile     string
	sampleBytes int64
	runs        int
	modes       []string
	workloads   []string
	workers     int
	runTimeout  time.Duration
	timeout     time.Duration
	keep        bool
	bin         string
	convFlags   []string
	mountYAML   string
}

func main() {
	var o options
	var nodes, rate, mode, workloads, readerList, readerRoot string
	var readerWorkers int
	var sampleMB int64
	flag.StringVar(&o.out, "out", "", "results and image cache directory (default integration/bench/out in the repository)")
	flag.StringVar(&nodes, "nodes", "1,4,8", "node counts to measure")
	flag.StringVar(&rate, "rate", "200m", "every link's cap each way, bit/s with an optional k, m or g suffix")
	flag.StringVar(&o.profile, "image", profileDebian, "image: debian (Python, NumPy, SciPy from the Debian archive, 742 MiB) or sample (synthetic, -sample-mb)")
	flag.Int64Var(&sampleMB, "sample-mb", 64, "content of the sample image, MiB")
	flag.IntVar(&o.runs, "runs", 3, "runs of each (nodes, mode, workload); rows show medians")
	flag.StringVar(&mode, "mode", "p2p,origin,pull", "comma-separated: p2p, origin (the same peers without a scheduler), pull (skopeo copy + umoci unpack of the plain image, then the same readers on the tree); both is p2p,origin")
	flag.StringVar(&workloads, "workloads", "all,startup", "what the readers read: all (every file), startup (the startup subset)")
	flag.IntVar(&o.workers, "workers", 4, "parallel reads of the reader of every file")
	flag.DurationVar(&o.runTimeout, "run-timeout", 10*time.Minute, "bound on one run, start to stop")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Hour, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (registry storage, caches, logs)")
	flag.StringVar(&o.bin, "bin", "", "run this damselfly binary (another commit's, for side-by-side runs) instead of building ./cmd/damselfly")
	convFlags := flag.String("convert-flags", "", "flags added to the image's conversion, space-separated (a study: --digest blake3, --level 4)")
	flag.StringVar(&o.mountYAML, "mount-yaml", "", "YAML added to every node's mount config, top-level keys (a study: 'kernel_image: {enable: true, lazy: true}')")
	flag.StringVar(&readerList, "reader-list", "", "internal: run as the reader of the files this file lists")
	flag.StringVar(&readerRoot, "reader-root", "", "internal: the reader's mount")
	flag.IntVar(&readerWorkers, "reader-workers", 1, "internal: the reader's parallel reads")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := func() error {
		if readerList != "" {
			return readerMain(ctx, readerList, readerRoot, readerWorkers)
		}
		o.convFlags = strings.Fields(*convFlags)
		var err error
		if o.nodes, err = parseInts(nodes); err != nil {
			return err
		}
		if o.rate, err = parseRate(rate); err != nil {
			return err
		}
		if mode == "both" {
			mode = modeP2P + "," + modeOrigin
		}
		for _, m := range strings.Split(mode, ",") {
			switch m = strings.TrimSpace(m); m {
			case modeP2P, modeOrigin, modePull:
				if !slices.Contains(o.modes, m) {
					o.modes = append(o.modes, m)
				}
			case "":
			default:
				return fmt.Errorf("-mode: %q is not p2p, origin, pull or both", m)
			}
		}
		for _, w := range strings.Split(workloads, ",") {
			switch w = strings.TrimSpace(w); w {
			case workloadAll, workloadStartup:
				o.workloads = append(o.workloads, w)
			case "":
			default:
				return fmt.Errorf("-workloads: %q is not all or startup", w)
			}
		}
		if len(o.modes) == 0 || len(o.workloads) == 0 || o.runs < 1 || sampleMB < 1 {
			return errors.New("want at least one mode, one workload, one run and a sample of 1 MiB or more")
		}
		o.sampleBytes = sampleMB << 20
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		return run(ctx, o, strings.Join(os.Args[1:], " "))
	}()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-deployed:", err)
		os.Exit(1)
	}
}

// rig is what every run shares.
type rig struct {
	o                  options
	root, bin, self    string
	work, logs, regDir string
	lists              map[string]string // workload -> file list for the reader
}

func (b *rig) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-deployed: "+format+"\n", args...)
}

func run(ctx context.Context, o options, args string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("run as root: network namespaces and FUSE mounts need it")
	}
	tools := []string{"docker-registry", "fusermount3", "ip", "tc", "nsenter", "chroot"}
	if slices.Contains(o.modes, modePull) {
		tools = append(tools, "skopeo", "umoci")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is required (make deps; iproute2, util-linux): %w", tool, err)
		}
	}
	b := &rig{o: o, lists: map[string]string{}}
	if b.root, err = moduleRoot(); err != nil {
		return err
	}
	if b.o.out == "" {
		b.o.out = filepath.Join(b.root, "integration", "bench", "out")
	}
	if b.o.out, err = filepath.Abs(b.o.out); err != nil {
		return err
	}
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	base := filepath.Join(b.o.out, "deployed")
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
	bi, err := b.prepareImage(ctx, b.regDir)
	if err != nil {
		return err
	}
	for w, paths := range map[string][]string{workloadAll: bi.all, workloadStartup: bi.Startup} {
		b.lists[w] = filepath.Join(b.work, w+".list")
		if err := writeList(b.lists[w], paths); err != nil {
			return err
		}
	}
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), RateBps: o.rate, Image: bi,
		Command: strings.TrimSpace("go run ./integration/bench/deployed " + args), Env: b.describe(ctx)}
	// The report is written after each node count, so that a long run
	// cut short keeps what it measured (its notes say what is missing).
	for i, n := range o.nodes {
		runs, err := b.measure(ctx, n, bi)
		rep.Runs = append(rep.Runs, runs...)
		rep.Rows = summarize(rep.Runs, bi, o.rate)
		rep.Notes = nil
		if err != nil || i < len(o.nodes)-1 {
			rep.Notes = []string{fmt.Sprintf("Incomplete: node counts %v not measured", o.nodes[i+1:])}
			if err != nil {
				rep.Notes[0] = fmt.Sprintf("Incomplete: %d nodes failed (%s); node counts %v not measured", n,
					harness.Esc(strings.SplitN(err.Error(), "\n", 2)[0]), o.nodes[i+1:])
			}
		}
		if len(rep.Runs) > 0 {
			if werr := harness.WriteReport(b.o.out, "deployed", rep, rep.markdown()); werr != nil {
				return errors.Join(err, werr)
			}
		}
		if err != nil {
			return err
		}
	}
	fmt.Print(rep.markdown())
	b.logf("wrote %s and %s", filepath.Join(b.o.out, "deployed.md"), filepath.Join(b.o.out, "deployed.json"))
	return nil
}

// measure makes the Net for n nodes and runs every mode and workload
// -runs times on it, modes side by side within each round so that they
// see the same machine, then deletes the Net.
func (b *rig) measure(ctx context.Context, n int, bi *benchImage) (runs []*runResult, err error) {
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
		for _, w := range b.o.workloads {
			for _, m := range b.o.modes {
				res, err := b.runOnce(ctx, nt, m, w, r+1, bi)
				if err != nil {
					return runs, err
				}
				runs = append(runs, res)
			}
		}
	}
	return runs, nil
}

// describe records the machine and tool versions.
func (b *rig) describe(ctx context.Context) map[string]string {
	env := map[string]string{
		"machine": fmt.Sprintf("%d cores, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version()),
		"workers": strconv.Itoa(b.o.workers),
	}
	for k, argv := range map[string][]string{
		"kernel": {"uname", "-r"}, "docker-registry": {"docker-registry", "--version"},
		"commit": {"git", "-C", b.root, "describe", "--always", "--dirty"},
		"skopeo": {"skopeo", "--version"}, "umoci": {"umoci", "--version"},
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
