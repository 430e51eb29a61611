package main

import (
	"context"
	schedd "damselfly/scheduler/daemon"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/fusemount"
	"damselfly/peer/daemon"
	"damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/sample"
	"damselfly/rafs/transport"
)

func newDemo(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a registry, a scheduler and three nodes on this machine and show an image read lazily and shared between peers",
		Long: `demo starts, on loopback, an origin registry (in-process unless --registry
names one), a scheduler and three nodes (each a peer daemon with its own
node cache and ports), converts a generated sample image to RAFS and pushes
it, then mounts it on each node in turn and reads the files a container
would read at startup. Node 2 gets node 1's chunks from node 1; the
registry is then stopped and node 3 still reads the image from its peers.
It ends with a report and removes everything it made, also on Ctrl-C.
Without FUSE (not root, or no /dev/fuse) it reads through the library view
instead of a mount.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.String("dir", "", "work directory (default: a new temporary one, removed at the end)")
	f.String("registry", "", "origin registry base URL, http(s)://host[:port] (default: one in this process)")
	f.Float64("scale", 0.5, "sample image size factor (1 is about 60 MB)")
	f.Bool("no-fuse", false, "read through the library view even where FUSE works")
	f.Bool("print-config", false, "print the effective settings (file, environment, flags) and exit")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := configs.New(g.configFile, "demo")
		if err != nil {
			return err
		}
		if err := l.BindFlags(cmd.Flags()); err != nil {
			return err
		}
		if l.Bool("print-config") {
			return l.PrintSettings(cmd.OutOrStdout())
		}
		scale, err := strconv.ParseFloat(l.String("scale"), 64)
		if err != nil {
			return fmt.Errorf("--scale: %w", err)
		}
		log, err := g.logger()
		if err != nil {
			return err
		}
		if g.logLevel == "info" {
			// The daemons' info logs would bury the demo's own output.
			log = slog.New(slog.DiscardHandler)
		}
		o := demoOptions{dir: l.String("dir"), registry: l.String("registry"), scale: scale, noFUSE: l.Bool("no-fuse"), log: log}
		return runDemo(cmd.Context(), o, os.Stdout)
	}
	return cmd
}

type demoOptions struct {
	dir      string
	registry string
	scale    float64
	noFUSE   bool
	log      *slog.Logger
}

// demoRow is one line of the final report.
type demoRow struct {
	name                     string
	note                     string
	ready, read              time.Duration
	files                    int
	bytes                    int64
	cacheB, peerB, registryB int64
	hits, misses             uint64
}

func runDemo(ctx context.Context, o demoOptions, out io.Writer) (err error) {
	if o.scale <= 0 {
		return fmt.Errorf("--scale %v: want > 0", o.scale)
	}
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "damselfly-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	step := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }
	say := func(format string, a ...any) { fmt.Fprintf(out, "    "+format+"\n", a...) }

	// Cleanups run in reverse order of starting, whatever happens.
	var cleanups []func() error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i]())
		}
	}()

	useFUSE, why := fuseUsable(o.noFUSE)
	if !useFUSE {
		step("FUSE is not usable here (%s): reading through the library view instead of a mount", why)
	}

	step("starting the origin registry")
	origin, err := startOrigin(o.registry)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, origin.Stop)
	if o.registry == "" {
		say("in-process registry on http://%s", origin.host)
	} else {
		say("%s, through a counting gate on http://%s", o.registry, origin.host)
	}

	step("building a sample image (a Debian-like base, Python packages, an app with a model) and converting it to RAFS")
	smp := sample.Generate("sample", sample.Options{Seed: 1, Scale: o.scale})
	startup := sample.StartupSet(smp)
	layout := filepath.Join(dir, "oci")
	if err := sample.WriteOCILayout(ctx, layout, smp); err != nil {
		return err
	}
	srcRef := "oci:" + layout + ":sample"
	plainRef := "docker://" + origin.host + "/demo/sample:oci"
	rafsRef := "docker://" + origin.host + "/demo/sample:rafs"
	if err := copyImage(ctx, srcRef, plainRef); err != nil {
		return err
	}
	t0 := time.Now()
	res, err := convert.Convert(ctx, srcRef, rafsRef, convert.Options{Build: rafs.BuildOptions{Prefetch: startup}, WorkDir: dir})
	if err != nil {
		return err
	}
	say("%d files, %s of gzip layers -> %s of chunks in %s; bootstrap %s; pushed as %s", res.Stats.Files,
		humanBytes(res.SourceLayers), humanBytes(res.NewBlobBytes), time.Since(t0).Round(time.Millisecond), humanBytes(res.BootstrapBytes), rafsRef)

	step("pulling the original image in full, for comparison")
	pull, pullBytes, err := fullPull(ctx, plainRef)
	if err != nil {
		return err
	}
	say("downloaded and decompressed %s of layers in %s", humanBytes(pullBytes), pull.Round(time.Millisecond))

	step("starting a scheduler and three nodes (each a peer daemon with its own node cache)")
	key := filepath.Join(dir, "cluster.key")
	if err := host.CreateClusterKeyFile(key); err != nil {
		return err
	}
	sched, err := startDemoScheduler(ctx, filepath.Join(dir, "scheduler"), key, o.log)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, sched.stop)
	var nodes []*demoNode
	for i := 1; i <= 3; i++ {
		n, err := startDemoNode(ctx, fmt.Sprintf("node%d", i), filepath.Join(dir, fmt.Sprintf("node%d", i)), key, sched.addr, origin.host, o.log)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, n.stop)
		nodes = append(nodes, n)
		say("%s: peer %s, proxy %s, cache %s", n.name, shortID(n.d.AddrInfo().ID.String()), n.d.ProxyURL(), n.cacheDir)
	}

	var rows []demoRow
	visit := func(n *demoNode, note string, beforeRead func() error) error {
		step("%s: mounting the image and reading its %d startup files%s", n.name, len(startup), note)
		v, err := n.open(ctx, rafsRef, useFUSE, dir, o.log)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, v.close)
		// Chunks come from the registry by ranged GETs; the manifest
		// and the bootstrap that mount-ready fetched are not counted.
		before := origin.rangeBytes.Load()
		pst := n.d.Node().Stats()
		if beforeRead != nil {
			if err := beforeRead(); err != nil {
				return err
			}
		}
		t := time.Now()
		nbytes, err := v.read(ctx, startup)
		if err != nil {
			return fmt.Errorf("%s: read: %w", n.name, err)
		}
		row := demoRow{name: n.name, note: note, ready: v.ready, read: time.Since(t), files: len(startup), bytes: nbytes}
		after := n.d.Node().Stats()
		row.peerB = after.PeerBytes - pst.PeerBytes
		row.cacheB = after.CacheBytes - pst.CacheBytes
		row.registryB = origin.rangeBytes.Load() - before
		cacheRead, hits, misses := v.cacheStats()
		row.cacheB += cacheRead
		row.hits, row.misses = hits, misses
		rows = append(rows, row)
		say("mount-ready in %s; read %s in %s: %s from the node cache, %s from peers, %s from the registry",
			row.ready.Round(time.Millisecond), humanBytes(nbytes), row.read.Round(time.Millisecond),
			humanBytes(row.cacheB), humanBytes(row.peerB), humanBytes(row.registryB))
		return nil
	}
	if err := visit(nodes[0], "", nil); err != nil {
		return err
	}
	if err := visit(nodes[1], "", nil); err != nil {
		return err
	}
	if err := visit(nodes[2], " with the registry stopped after mounting", func() error {
		say("stopping the registry")
		return origin.Stop()
	}); err != nil {
		return err
	}

	step("report")
	printDemoReport(out, rows, pull, pullBytes)
	if rows[1].registryB > 0 {
		return fmt.Errorf("node2 fetched %s from the registry, want all of it from node1", humanBytes(rows[1].registryB))
	}
	fmt.Fprintln(out, "demo: OK")
	return nil
}

// fuseUsable says whether the demo can mount, and if not, why.
func fuseUsable(disabled bool) (bool, string) {
	switch {
	case disabled:
		return false, "--no-fuse"
	case os.Geteuid() != 0:
		return false, "not running as root"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return false, "no /dev/fuse"
	}
	if _, err := exec.LookPath("tar"); err != nil {
		return false, "no tar to read the mount with"
	}
	return true, ""
}

// copyImage copies an image between two references.
func copyImage(ctx context.Context, from, to string) error {
	src, err := transport.Parse(from, transport.Options{})
	if err != nil {
		return err
	}
	img, err := transport.ReadImage(ctx, src, transport.Options{})
	if err != nil {
		return err
	}
	dst, err := transport.Parse(to, transport.Options{})
	if err != nil {
		return err
	}
	return transport.WriteImage(ctx, dst, img, transport.Options{})
}

// fullPull downloads and decompresses every layer of ref, as a pull
// before a container start does, and returns how long it took and the
// bytes downloaded.
func fullPull(ctx context.Context, ref string) (time.Duration, int64, error) {
	t := time.Now()
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		return 0, 0, err
	}
	img, err := transport.ReadImage(ctx, r, transport.Options{})
	if err != nil {
		return 0, 0, err
	}
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	var n int64
	for _, l := range layers {
		sz, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, err
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, err
		}
		n += sz
	}
	return time.Since(t), n, nil
}

type demoScheduler struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func startDemoScheduler(ctx context.Context, dir, key string, log *slog.Logger) (*demoScheduler, error) {
	cfg := schedd.Default(dir)
	cfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.ClusterKeyFile = key
	cfg.Admin.Listen = "127.0.0.1:0"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s, err := schedd.New(cfg, log.With("daemon", "scheduler"))
	if err != nil {
		return nil, err
	}
	ai := s.AddrInfo()
	if len(ai.Addrs) == 0 {
		return nil, errors.New("scheduler has no address")
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ds := &demoScheduler{addr: ai.Addrs[0].String() + "/p2p/" + ai.ID.String(), cancel: cancel, done: make(chan error, 1)}
	go func() { ds.done <- s.Run(rctx) }()
	return ds, nil
}

func (s *demoScheduler) stop() error {
	s.cancel()
	return <-s.done
}

type demoNode struct {
	name     string
	cacheDir string
	d        *daemon.Daemon
	cancel   context.CancelFunc
	done     chan error
}

func startDemoNode(ctx context.Context, name, dir, key, scheduler, originHost string, log *slog.Logger) (*demoNode, error) {
	cfg := daemon.Default()
	cfg.Dir = dir
	cfg.Cache.Dir = filepath.Join(dir, "cache") // each node its own
	cfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.ClusterKeyFile = key
	cfg.Proxy.Listen = "127.0.0.1:0"
	cfg.Upstream.DefaultRegistry = "http://" + originHost
	cfg.Scheduler.Schedulers = []string{scheduler}
	cfg.Scheduler.HeartbeatInterval = 500 * time.Millisecond
	cfg.Node.FetchDeadline = 15 * time.Second
	cfg.Labels = map[string]string{"host": name}
	d, err := daemon.New(cfg, log.With("daemon", name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := &demoNode{name: name, cacheDir: filepath.Join(dir, "cache"), d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- d.Run(rctx) }()
	return n, nil
}

func (n *demoNode) stop() error {
	n.cancel()
	if err := <-n.done; err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

// demoView is an image opened on a node: a FUSE mount, or the library
// view where FUSE is not usable.
type demoView struct {
	ready      time.Duration
	read       func(ctx context.Context, files []string) (int64, error)
	cacheStats func() (bytes int64, hits, misses uint64)
	close      func() error
}

func (n *demoNode) open(ctx context.Context, ref string, useFUSE bool, dir string, log *slog.Logger) (*demoView, error) {
	if useFUSE {
		return n.mount(ctx, ref, filepath.Join(dir, n.name, "mnt"), log)
	}
	return n.library(ctx, ref)
}

// mount runs the mount daemon in this process on a new mountpoint. This
// process never reads its own mount (a read stuck in the kernel could
// not be interrupted by its own exit): a tar child process does.
func (n *demoNode) mount(ctx context.Context, ref, mnt string, log *slog.Logger) (*demoView, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	cfg := fusemount.DefaultConfig()
	cfg.Cache.Dir = n.cacheDir
	cfg.Backend.Proxy.URL = n.d.ProxyURL()
	cfg.Backend.Proxy.PingURL = n.d.ProxyURL() + "/healthz"
	cfg.Backend.Proxy.Fallback = true
	cfg.Prefetch.Enable = false // the demo shows what reads alone fetch
	cfg.APISocket = filepath.Join(filepath.Dir(mnt), "mount.sock")
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan *fusemount.Daemon, 1)
	done := make(chan error, 1)
	t := time.Now()
	go func() {
		done <- fusemount.Run(mctx, fusemount.Options{Image: ref, Mountpoint: mnt, Config: cfg, Logger: log.With("daemon", n.name+"-mount"),
			Ready: func(d *fusemount.Daemon) { ready <- d }})
	}()
	var d *fusemount.Daemon
	select {
	case d = <-ready:
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("%s: mount: %w", n.name, err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
	v := &demoView{ready: time.Since(t)}
	v.read = func(ctx context.Context, files []string) (int64, error) {
		cmd := exec.CommandContext(ctx, "tar", append([]string{"-cf", "-", "-C", mnt}, files...)...)
		var cw countWriter
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &cw, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("tar: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return cw.files(mnt, files)
	}
	v.cacheStats = func() (int64, uint64, uint64) {
		st := d.Status(mnt)
		return int64(st.ReadBytes[fusemount.SourceCache]), st.CacheHits, st.CacheMiss
	}
	v.close = func() error {
		cancel()
		return <-done
	}
	return v, nil
}

// library opens the image through the node's proxy without a mount.
func (n *demoNode) library(ctx context.Context, ref string) (*demoView, error) {
	t := time.Now()
	img, err := image.Open(ctx, ref, image.Options{})
	if err != nil {
		return nil, err
	}
	src, err := newProxyChunkSource(n.d.ProxyURL(), ref, img.Bootstrap())
	if err != nil {
		img.Close()
		return nil, err
	}
	// As a mount does: grants for every blob while the registry is up,
	// so reads go on through an outage.
	if err := src.authorize(ctx); err != nil {
		img.Close()
		return nil, err
	}
	fsys := rafs.NewFS(ctx, img.Bootstrap(), src)
	v := &demoView{ready: time.Since(t)}
	v.read = func(ctx context.Context, files []string) (int64, error) {
		var total int64
		for _, f := range files {
			b, err := fs.ReadFile(fsys, f)
			if err != nil {
				return total, err
			}
			total += int64(len(b))
		}
		return total, nil
	}
	v.cacheStats = func() (int64, uint64, uint64) { return 0, 0, 0 }
	v.close = img.Close
	return v, nil
}

// countWriter counts and discards what tar writes.
type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// files returns the size of the files tar read (its output also holds
// headers and padding).
func (c *countWriter) files(root string, files []string) (int64, error) {
	var n int64
	for _, f := range files {
		st, err := os.Lstat(filepath.Join(root, f))
		if err != nil {
			return 0, err
		}
		if st.Mode().IsRegular() {
			n += st.Size()
		}
	}
	return n, nil
}

func printDemoReport(out io.Writer, rows []demoRow, pull time.Duration, pullBytes int64) {
	fmt.Fprintf(out, "    %-6s %12s %12s %12s %12s %12s %10s\n", "node", "mount-ready", "read", "node cache", "peers", "registry", "hit ratio")
	for _, r := range rows {
		ratio := "-"
		if t := r.hits + r.misses; t > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*float64(r.hits)/float64(t))
		}
		fmt.Fprintf(out, "    %-6s %12s %12s %12s %12s %12s %10s%s\n", r.name, r.ready.Round(time.Millisecond), r.read.Round(time.Millisecond),
			humanBytes(r.cacheB), humanBytes(r.peerB), humanBytes(r.registryB), ratio, r.note)
	}
	fmt.Fprintf(out, "    full pull of the original image: %s for %s; mount-ready on node1 took %.1f%% of it\n",
		pull.Round(time.Millisecond), humanBytes(pullBytes), 100*rows[0].ready.Seconds()/pull.Seconds())
}

func shortID(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-8:]
	}
	return id
}
