package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/integration/harness"
	"damselfly/rafs/rafstest"
)

// requireContainerd skips (or fails, see rafstest.SkipOrFail) unless
// containerd, its ctr client, its runc shim and runc are installed (make
// deps installs them from Debian).
func requireContainerd(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc"} {
		rafstest.RequireTool(t, tool)
	}
}

// containerd is one containerd daemon (harness.StartContainerd), a real
// process with its own root, state directory and socket, and the hosts
// directory its pulls use. Unless a test asks for more, its plugins are
// the ones ctr's pull and run need: no CRI (ctr does not use it: the
// hosts directory is given to each pull with --hosts-dir, which is what
// CRI's registry.config_path does for the kubelet's pulls), and the
// overlayfs snapshotter.
type containerd struct {
	t       *testing.T
	name    string
	d       *harness.Containerd
	hosts   string
	ran     []string // IDs of the containers run, removed at stop if left
	stopped bool
}

// startContainerd starts a containerd whose pulls use the hosts directory
// hosts, and waits until it answers. It is stopped in t.Cleanup: its
// containers removed, SIGTERM, then whatever it left mounted under its
// directory unmounted before t.TempDir removes it.
func startContainerd(t *testing.T, name, hosts string) *containerd {
	t.Helper()
	return startContainerdWith(t, name, hosts, harness.ContainerdConfig{})
}

// startContainerdWith is startContainerd with cfg's plugins, socket and
// extra TOML; its Name and Dir are the test's.
func startContainerdWith(t *testing.T, name, hosts string, cfg harness.ContainerdConfig) *containerd {
	t.Helper()
	cfg.Name, cfg.Dir = "containerd-"+name, t.TempDir()
	d, err := harness.StartContainerd(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{t: t, name: name, d: d, hosts: hosts}
	t.Cleanup(c.stop)
	return c
}

// ctr runs `ctr --address SOCK ARGS...` for at most timeout and returns
// its stdout; an error carries its stderr.
func (c *containerd) ctr(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.d.Socket()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("containerd %s: ctr %s: %w\n%s%s", c.name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// pull pulls and unpacks ref with the instance's hosts directory.
func (c *containerd) pull(ref string) error {
	_, err := c.ctr(2*time.Minute, "images", "pull", "--hosts-dir", c.hosts, ref)
	return err
}

// run runs the pulled image ref once (`ctr run --rm`) and returns what
// the program printed.
func (c *containerd) run(ref string) (string, error) {
	id := fmt.Sprintf("hello-%s-%d", c.name, len(c.ran))
	c.ran = append(c.ran, id)
	out, err := c.ctr(time.Minute, "run", "--rm", ref, id)
	return strings.TrimSpace(out), err
}

// stop removes containers a failed run left, stops the daemon (a daemon
// that needs the kill fails the test), and unmounts what is left under
// its directory. It is idempotent.
func (c *containerd) stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	if !c.d.Proc().Exited() {
		for _, id := range c.ran {
			// Best effort: a container --rm removed is not found.
			c.ctr(10*time.Second, "tasks", "rm", "-f", id)
			c.ctr(10*time.Second, "containers", "rm", id)
		}
	}
	stopOrFail(c.t, c.d.Proc())
	if left := unmountUnder(c.t, c.d.Dir()); len(left) > 0 {
		c.t.Errorf("containerd %s left mounted: %s", c.name, strings.Join(left, ", "))
	}
	showLog(c.t, c.d.Proc())
}

// unmountUnder is harness.UnmountUnder, failing t for a mount it could
// not detach.
func unmountUnder(t *testing.T, dir string) []string {
	t.Helper()
	under, err := harness.UnmountUnder(dir)
	if err != nil {
		t.Error(err)
	}
	return under
}

// containerdHosts writes a hosts directory for pulls from the registry at
// registry ("127.0.0.1:PORT", plain HTTP) through the mirror at mirror
// ("http://127.0.0.1:PORT", a node's peer): REGISTRY/hosts.toml,
// configs/containerd/hosts.toml as shipped with only its server and its
// mirror's URL replaced. It returns the directory.
func containerdHosts(t *testing.T, registry, mirror string) string {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join("..", "..", "configs", "containerd", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	toml := string(shipped)
	for _, r := range [][2]string{
		{`server = "https://registry-1.docker.io"`, `server = "http://` + registry + `"`},
		{`[host."http://127.0.0.1:7950"]`, `[host."` + mirror + `"]`},
	} {
		if strings.Count(toml, r[0]) != 1 {
			t.Fatalf("configs/containerd/hosts.toml has %d lines %s, want 1", strings.Count(toml, r[0]), r[0])
		}
		toml = strings.Replace(toml, r[0], r[1], 1)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, registry), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, registry, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
