package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	ctrdclient "github.com/containerd/containerd/v2/client"
)

// ContainerdConfig configures a containerd daemon of its own: root,
// state, socket and config.toml, none of them the system's.
type ContainerdConfig struct {
	// Name names the process in errors, its log file Dir/Name.log and
	// its configuration file Dir/Name.toml.
	Name string
	// Dir holds containerd's root (Dir/root), its state (Dir/state),
	// the configuration and the log.
	Dir string
	// Socket is the gRPC socket; "" is Dir/containerd.sock. The ttrpc
	// socket is Socket+".ttrpc". A caller sets it when another process
	// must be configured with it before containerd starts.
	Socket string
	// Snapshotters are proxy snapshotter plugins: name to the unix
	// socket the snapshotter serves on.
	Snapshotters map[string]string
	// CRI enables containerd's CRI plugin, with its TCP service off, the
	// remote-snapshot annotations passed to the snapshotter
	// (disable_snapshot_annotations = false, as
	// configs/containerd/config.toml has it) and CNI directories under
	// Dir that hold nothing: image calls need no CNI. Off, the plugin is
	// disabled; ctr and the client library do not use it.
	CRI bool
	// CRISnapshotter is the snapshotter CRI's pulls unpack into; ""
	// leaves containerd's default. It needs CRI.
	CRISnapshotter string
	// Extra is more of config.toml (whole TOML tables), written after
	// the rest.
	Extra string
}

// Validate reports every problem of c at once.
func (c ContainerdConfig) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("containerd: Name is empty"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("containerd: Dir is empty"))
	}
	if c.CRISnapshotter != "" && !c.CRI {
		errs = append(errs, fmt.Errorf("containerd: CRISnapshotter %q is set but CRI is off", c.CRISnapshotter))
	}
	for name, sock := range c.Snapshotters {
		if name == "" || sock == "" {
			errs = append(errs, fmt.Errorf("containerd: Snapshotters has name %q with socket %q; want both", name, sock))
		}
	}
	return errors.Join(errs...)
}

// Timeouts of a starting containerd: how long it has to answer, and how
// long each attempt to reach it may take.
const (
	containerdReadyTimeout   = 30 * time.Second
	containerdAttemptTimeout = 5 * time.Second
)

// Containerd is one containerd daemon started by StartContainerd. Its
// methods are safe for concurrent use.
type Containerd struct {
	cfg ContainerdConfig
	p   *Proc
}

// StartContainerd writes cfg's config.toml, starts containerd (which
// must be on PATH) and waits until it answers on its socket, at most
// 30 seconds or until ctx ends. A containerd that does not answer is
// stopped. The caller stops it with Stop and unmounts what it left
// under Dir.
func StartContainerd(ctx context.Context, cfg ContainerdConfig) (*Containerd, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		return nil, fmt.Errorf("containerd is required (make deps installs it): %w", err)
	}
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(cfg.Dir, "containerd.sock")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	toml := filepath.Join(cfg.Dir, cfg.Name+".toml")
	if err := os.WriteFile(toml, []byte(cfg.toml()), 0o600); err != nil {
		return nil, err
	}
	p, err := Start(ProcConfig{Name: cfg.Name, LogDir: cfg.Dir, Path: "containerd", Args: []string{"--config", toml}})
	if err != nil {
		return nil, err
	}
	c := &Containerd{cfg: cfg, p: p}
	if err := c.waitReady(ctx); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	return c, nil
}

// toml is config.toml (version 2) for c, whose Socket is set.
func (c ContainerdConfig) toml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version = 2\nroot = %q\nstate = %q\n", filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"))
	b.WriteString("disabled_plugins = [\n")
	if !c.CRI {
		b.WriteString("  \"io.containerd.grpc.v1.cri\",\n")
	}
	for _, p := range []string{
		"io.containerd.internal.v1.opt",
		"io.containerd.internal.v1.tracing",
		"io.containerd.tracing.processor.v1.otlp",
		"io.containerd.snapshotter.v1.aufs",
		"io.containerd.snapshotter.v1.btrfs",
		"io.containerd.snapshotter.v1.devmapper",
		"io.containerd.snapshotter.v1.zfs",
	} {
		fmt.Fprintf(&b, "  %q,\n", p)
	}
	b.WriteString("]\n")
	fmt.Fprintf(&b, "\n[grpc]\n  address = %q\n\n[ttrpc]\n  address = %q\n", c.Socket, c.Socket+".ttrpc")
	if len(c.Snapshotters) > 0 {
		b.WriteString("\n[proxy_plugins]\n")
		for _, name := range slices.Sorted(maps.Keys(c.Snapshotters)) {
			fmt.Fprintf(&b, "  [proxy_plugins.%s]\n    type = \"snapshot\"\n    address = %q\n", name, c.Snapshotters[name])
		}
	}
	if c.CRI {
		const cri = `plugins."io.containerd.grpc.v1.cri"`
		fmt.Fprintf(&b, "\n[%s]\n  disable_tcp_service = true\n  [%s.containerd]\n", cri, cri)
		if c.CRISnapshotter != "" {
			fmt.Fprintf(&b, "    snapshotter = %q\n", c.CRISnapshotter)
		}
		b.WriteString("    disable_snapshot_annotations = false\n")
		fmt.Fprintf(&b, "  [%s.cni]\n    conf_dir = %q\n    bin_dir = %q\n", cri, filepath.Join(c.Dir, "cni"), filepath.Join(c.Dir, "cni-bin"))
	}
	b.WriteString(c.Extra)
	return b.String()
}

// waitReady polls until containerd answers a Version call.
func (c *Containerd) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, containerdReadyTimeout)
	defer cancel()
	for {
		cl, err := c.Client(ctx, ctrdclient.WithTimeout(containerdAttemptTimeout))
		if err == nil {
			return cl.Close()
		}
		if c.p.Exited() {
			return fmt.Errorf("%s exited: %v:\n%s", c.cfg.Name, c.p.Err(), c.p.LogTail(3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer on %s: %w (%w)\n%s", c.cfg.Name, c.cfg.Socket, err, ctx.Err(), c.p.LogTail(3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Client is containerd's v2 client on the socket, made with opts, once
// a Version call through it (at most 5 seconds) has been answered. The
// caller closes it.
func (c *Containerd) Client(ctx context.Context, opts ...ctrdclient.Opt) (*ctrdclient.Client, error) {
	cl, err := ctrdclient.New(c.cfg.Socket, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.cfg.Name, err)
	}
	vctx, cancel := context.WithTimeout(ctx, containerdAttemptTimeout)
	defer cancel()
	if _, err := cl.Version(vctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("%s: version: %w", c.cfg.Name, err)
	}
	return cl, nil
}

// Socket is containerd's gRPC socket, for ctr --address.
func (c *Containerd) Socket() string { return c.cfg.Socket }

// Dir is the directory of its root, state, configuration and log.
func (c *Containerd) Dir() string { return c.cfg.Dir }

// Proc is the containerd process.
func (c *Containerd) Proc() *Proc { return c.p }

// Stop stops containerd: SIGTERM, then SIGKILL after the stop timeout
// (reported as ErrKilled). It does not unmount what containerd left
// under Dir.
func (c *Containerd) Stop() error { return c.p.Stop() }
