package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	ctrdclient "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/pkg/snapshotters"

	"damselfly/integration/bench"
	"damselfly/integration/bench/shaper"
	"damselfly/integration/harness"
	"damselfly/rafs/transport"
)

// runResult is one cold start.
type runResult struct {
	Name  string `json:"name"`
	Round int    `json:"round"`
	// Load is the load average when the run started.
	Load string `json:"loadavg"`
	Link string `json:"link"`
	Mode string `json:"mode"`
	// Pull is the client's Pull (with unpack) alone; FirstOutput the
	// time from the start of the pull to the container's first line.
	Pull        float64 `json:"pull_seconds"`
	FirstOutput float64 `json:"first_output_seconds"`
	Output      string  `json:"output"`
	// LinkBytes is what crossed the shaped link toward the node.
	LinkBytes int64 `json:"link_bytes"`
	// MountDaemons is how many `damselfly mount` processes served the
	// run (rafs: 1).
	MountDaemons int `json:"mount_daemons,omitempty"`
}

// run starts a shaper to the registry on link, a fresh snapshotter (rafs
// mode) and containerd, pulls and starts the container, and stops
// everything again.
func (h *rig) run(ctx context.Context, name, link, mode string) (_ *runResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.o.runTimeout)
	defer cancel()
	dir := filepath.Join(h.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if left, _ := harness.UnmountUnder(dir); len(left) > 0 {
			logf("  unmounted what the run left: %s", strings.Join(left, ", "))
		}
		if !h.o.keep && err == nil {
			os.RemoveAll(dir)
		}
	}()

	sh, err := shaper.New(h.reg.Host(), links[link])
	if err != nil {
		return nil, err
	}
	shCtx, shStop := context.WithCancel(context.Background())
	shDone := make(chan error, 1)
	go func() { shDone <- sh.Run(shCtx) }()
	defer func() { shStop(); <-shDone }()

	// The snapshotter's root is short: its mount daemons' sockets live
	// under it, and a unix socket path has 107 bytes at most.
	snRoot, err := os.MkdirTemp("", "dfsn-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if left, _ := harness.UnmountUnder(snRoot); len(left) > 0 {
			logf("  unmounted what the run left: %s", strings.Join(left, ", "))
		}
		os.RemoveAll(snRoot)
	}()
	snSock := filepath.Join(snRoot, "sn.sock")
	sn, err := h.startSnapshotter(dir, snRoot, snSock)
	if err != nil {
		return nil, err
	}
	defer h.stopSnapshotter(sn, snRoot)

	// CRI is off: the client library pulls as CRI does.
	ctrd, err := harness.StartContainerd(ctx, harness.ContainerdConfig{Name: "containerd", Dir: dir, Snapshotters: map[string]string{"damselfly": snSock}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := ctrd.Stop(); serr != nil && err == nil {
			err = fmt.Errorf("stop containerd: %w", serr)
		}
	}()
	cl, err := ctrd.Client(ctx, ctrdclient.WithTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	nctx := namespaces.WithNamespace(ctx, "bench")

	tag, snName := modeTags[mode].tag, modeTags[mode].snapshotter
	ref := sh.Addr() + "/" + h.image.Repo + ":" + tag
	opts := []ctrdclient.RemoteOpt{
		ctrdclient.WithPullUnpack,
		ctrdclient.WithPullSnapshotter(snName),
		ctrdclient.WithResolver(docker.NewResolver(docker.ResolverOptions{
			Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost)),
		})),
		// What CRI passes (disable_snapshot_annotations = false), for
		// both modes; overlayfs ignores the labels.
		ctrdclient.WithImageHandlerWrapper(func(hd images.Handler) images.Handler {
			return snapshotters.AppendInfoHandlerWrapper(ref)(hd)
		}),
	}

	res := &runResult{Name: name, Link: link, Mode: mode}
	before := sh.Stats().DownBytes
	start := time.Now()
	img, err := cl.Pull(nctx, ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w\n--- snapshotter:\n%s", ref, err, sn.LogTail(3000))
	}
	res.Pull = time.Since(start).Seconds()
	id := "bench-" + name
	ctr, err := cl.NewContainer(nctx, id,
		ctrdclient.WithImage(img),
		ctrdclient.WithSnapshotter(snName),
		ctrdclient.WithNewSnapshot(id+"-rootfs", img),
		ctrdclient.WithNewSpec(oci.WithImageConfig(img), oci.WithEnv(bench.PythonEnv), oci.WithProcessArgs("python3", "-c", h.o.cmd)))
	if err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	defer ctr.Delete(context.WithoutCancel(nctx), ctrdclient.WithSnapshotCleanup)
	out := &firstLine{got: make(chan struct{})}
	task, err := ctr.NewTask(nctx, cio.NewCreator(cio.WithStreams(nil, out, out), cio.WithFIFODir(filepath.Join(dir, "fifo"))))
	if err != nil {
		return nil, fmt.Errorf("task: %w\n--- snapshotter:\n%s", err, sn.LogTail(3000))
	}
	defer task.Delete(context.WithoutCancel(nctx), ctrdclient.WithProcessKill)
	exit, err := task.Wait(nctx)
	if err != nil {
		return nil, err
	}
	if err := task.Start(nctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	select {
	case <-out.got:
	case st := <-exit:
		return nil, fmt.Errorf("container exited %d before printing a line: %q", st.ExitCode(), out.String())
	case <-ctx.Done():
		return nil, fmt.Errorf("no output within %v: %w", h.o.runTimeout, ctx.Err())
	}
	res.FirstOutput = time.Since(start).Seconds()
	res.LinkBytes = sh.Stats().DownBytes - before
	res.Output = out.line()
	if snName == "damselfly" {
		entries, _ := os.ReadDir(filepath.Join(snRoot, "mounts"))
		res.MountDaemons = len(entries)
		if h.o.keep {
			keepDaemons(filepath.Join(snRoot, "mounts"), dir)
		}
	}
	select {
	case st := <-exit:
		if st.ExitCode() != 0 {
			return nil, fmt.Errorf("container exited %d: %q", st.ExitCode(), out.String())
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("container still running after %v: %w", h.o.runTimeout, ctx.Err())
	}
	return res, nil
}

// keepDaemons copies each mount daemon's log and metrics (from its status
// socket) under root into dir, for -keep.
func keepDaemons(root, dir string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		src := filepath.Join(root, e.Name())
		if b, err := os.ReadFile(filepath.Join(src, "mount.log")); err == nil {
			os.WriteFile(filepath.Join(dir, "mount-"+e.Name()+".log"), b, 0o644)
		}
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(src, "api.sock"))
			}}}
		resp, err := cl.Get("http://mount/metrics")
		if err != nil {
			logf("  metrics of mount daemon %s: %v", e.Name(), err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		os.WriteFile(filepath.Join(dir, "mount-"+e.Name()+".metrics"), b, 0o644)
	}
}

// startSnapshotter starts `damselfly snapshotter` with its state in
// root, its configs, log and node cache (dir/cache) in dir: mount
// daemons straight to the registry (through the shaper, by the image
// reference), configs/mount.yaml's defaults otherwise.
func (h *rig) startSnapshotter(dir, root, sock string) (*harness.Proc, error) {
	mountCfg := filepath.Join(dir, "mount.yaml")
	if err := os.WriteFile(mountCfg, fmt.Appendf(nil, "backend:\n  type: registry\ncache:\n  dir: %s\n%s\n", filepath.Join(dir, "cache"), h.o.mountExtra), 0o600); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "snapshotter.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "root: %s\naddress: %s\nmount:\n  config: %s\nadvanced:\n  mount:\n    binary: %s\n",
		root, sock, mountCfg, h.bin), 0o600); err != nil {
		return nil, err
	}
	p, err := harness.Start(harness.ProcConfig{Name: "snapshotter", LogDir: dir, Path: h.bin, Args: []string{"--config", cfg, "snapshotter"}})
	if err != nil {
		return nil, err
	}
	if _, err := p.WaitLine("snapshotter ", 30*time.Second); err != nil {
		p.Kill()
		return nil, fmt.Errorf("snapshotter did not start: %w\n%s", err, p.LogTail(2000))
	}
	return p, nil
}

// stopSnapshotter stops the snapshotter and the mount daemons under
// root it left (they outlive it by design).
func (h *rig) stopSnapshotter(p *harness.Proc, root string) {
	if err := p.Stop(); err != nil {
		logf("  stop snapshotter: %v", err)
	}
	for _, pid := range harness.MountDaemons(root) {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(harness.MountDaemons(root)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range harness.MountDaemons(root) {
		logf("  mount daemon %d did not exit on SIGTERM; killing it", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// firstLine is a container's stdout and stderr; got is closed at the
// first complete line.
type firstLine struct {
	mu   sync.Mutex
	b    bytes.Buffer
	got  chan struct{}
	done bool
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.b.Write(p)
	if !f.done && bytes.IndexByte(f.b.Bytes(), '\n') >= 0 {
		f.done = true
		close(f.got)
	}
	return len(p), nil
}

func (f *firstLine) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.b.String()
}

func (f *firstLine) line() string {
	s, _, _ := strings.Cut(f.String(), "\n")
	return s
}

// plainBytes is the sum of the gzip layers of tag v1 in the layout dir.
func plainBytes(dir string) (int64, error) {
	r, err := transport.Parse("oci:"+dir+":v1", transport.Options{})
	if err != nil {
		return 0, err
	}
	img, err := transport.ReadImage(context.Background(), r, transport.Options{})
	if err != nil {
		return 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
