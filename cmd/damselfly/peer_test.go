package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"damselfly/configs"
	"damselfly/peer/daemon"
	"damselfly/rafs/rafstest"
)

// daemonProc is a daemon process started by a test.
type daemonProc struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr *strings.Builder
	lines  []string // stdout lines up to the ready line
	exited bool
}

// startProc runs the binary with args and reads stdout until a line
// starting with ready. It kills the process in t.Cleanup unless stop ran.
func startProc(t *testing.T, ctx context.Context, ready string, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DAMSELFLY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	p := &daemonProc{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	sc := bufio.NewScanner(p.stdout)
	for sc.Scan() {
		p.lines = append(p.lines, sc.Text())
		if strings.HasPrefix(sc.Text(), ready) {
			return p
		}
	}
	t.Fatalf("damselfly %s: no %q line; stdout %q; stderr:\n%s", strings.Join(args, " "), ready, p.lines, p.stderr.String())
	return nil
}

// line returns the rest of the first stdout line starting with prefix.
func (p *daemonProc) line(prefix string) string {
	for _, l := range p.lines {
		if s, ok := strings.CutPrefix(l, prefix); ok {
			return s
		}
	}
	return ""
}

// stop sends SIGTERM and returns how the process exited.
func (p *daemonProc) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, p.stdout)
	err := p.cmd.Wait()
	p.exited = true
	if err != nil {
		return fmt.Errorf("%w; stderr:\n%s", err, p.stderr.String())
	}
	return nil
}

func healthz(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("healthz: got %d %q, want 200 ok", resp.StatusCode, body)
	}
	return nil
}

// TestPeerCommand starts a scheduler and two peers as a user would, checks
// their output and /healthz, and stops them with SIGTERM, which must end
// each with exit code 0.
func TestPeerCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := filepath.Join(dir, "cluster.key")
	mustRun(t, nil, "peer", "keygen", key)
	st, err := os.Stat(key)
	if err != nil {
		t.Fatalf("keygen: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("keygen wrote mode %v, want 0600", st.Mode().Perm())
	}
	if r := run(t, nil, "peer", "keygen", key); r.code == 0 {
		t.Error("keygen over an existing key succeeded")
	}

	schedCfg := filepath.Join(dir, "scheduler.yaml")
	writeFile(t, schedCfg, fmt.Sprintf("host:\n  listen_addrs: [\"/ip4/127.0.0.1/tcp/0\"]\n  cluster_key_file: %q\nadmin:\n  listen: 127.0.0.1:0\n", key))
	sched := startProc(t, ctx, "admin ", "scheduler", "--dir", filepath.Join(dir, "sched"), "--config", schedCfg)
	schedAddr := sched.line("listening ")

	peerCfg := filepath.Join(dir, "peer.yaml")
	writeFile(t, peerCfg, fmt.Sprintf(`host:
  listen_addrs: ["/ip4/127.0.0.1/tcp/0"]
  cluster_key_file: %q
cache:
  dir: ""
proxy:
  listen: 127.0.0.1:0
scheduler:
  schedulers: [%q]
labels:
  zone: test
`, key, schedAddr))
	var peers []*daemonProc
	for i := range 2 {
		p := startProc(t, ctx, "proxy ", "peer", "--config", peerCfg, "--dir", filepath.Join(dir, fmt.Sprintf("peer%d", i)))
		l := p.line("listening ")
		if !strings.HasPrefix(l, "/ip4/127.0.0.1/tcp/") || !strings.Contains(l, "/p2p/12D3KooW") {
			t.Errorf("peer %d: listening line %q, want /ip4/127.0.0.1/tcp/<port>/p2p/<id>", i, l)
		}
		if err := healthz(ctx, p.line("proxy ")); err != nil {
			t.Errorf("peer %d: %v", i, err)
		}
		for _, f := range []string{"identity.key", "cache"} {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("peer%d", i), f)); err != nil {
				t.Errorf("peer %d state dir: %v", i, err)
			}
		}
		peers = append(peers, p)
	}
	// A mirror pull from a registry that is down shows in peer status,
	// with the registry failing and the scheduler session.
	purl := peers[0].line("proxy ")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, purl+"/v2/lib/app/manifests/v1?ns=127.0.0.1:1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Nobody the registry allowed before: refused, whether or not the
	// node holds the manifest (the origin could not be asked).
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("pull from a registry that is down: %s, want 403", resp.Status)
	}
	var out string
	rafstest.Eventually(t, 10*time.Second, "peer status showing the scheduler connected", func() bool {
		out = mustRun(t, nil, "peer", "status", "--url", purl).stdout
		return strings.Contains(out, " connected ")
	})
	for _, want := range []string{"127.0.0.1:1 FAILING", "GET  http://127.0.0.1:1/lib/app manifests v1 403", "from refused", "delivered    cache"} {
		if !strings.Contains(out, want) {
			t.Errorf("peer status lacks %q:\n%s", want, out)
		}
	}
	for i, p := range peers {
		if err := p.stop(); err != nil {
			t.Errorf("peer %d after SIGTERM: %v, want exit 0", i, err)
		}
	}
	if err := sched.stop(); err != nil {
		t.Errorf("scheduler after SIGTERM: %v, want exit 0", err)
	}
}

func TestPeerRefusesMissingClusterKey(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "peer.yaml")
	writeFile(t, cfg, "host:\n  listen_addrs: [\"/ip4/127.0.0.1/tcp/0\"]\ncache:\n  dir: \"\"\nproxy:\n  listen: 127.0.0.1:0\n")
	r := run(t, nil, "peer", "--config", cfg, "--dir", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "cluster") {
		t.Errorf("got exit %d, stderr %q; want a failure naming the cluster key", r.code, r.stderr)
	}
}

// TestPeerSampleConfig loads configs/peer.yaml: every key must be known,
// and the values must be the defaults and validate.
func TestPeerSampleConfig(t *testing.T) {
	t.Parallel()
	def := daemon.Default()
	got, err := configs.Load(filepath.Join("..", "..", "configs", "peer.yaml"), "peer", def)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("sample config does not validate: %v", err)
	}
	// The sample's [] and {} are the defaults' nil.
	for _, s := range []*[]string{&got.Host.AnnounceAddrs, &got.Upstream.PlainHTTP, &got.Upstream.LendNodeCredentials, &got.Scheduler.Schedulers} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	if len(got.Labels) == 0 {
		got.Labels = nil
	}
	if !reflect.DeepEqual(got, def) {
		t.Errorf("sample differs from the defaults:\ngot  %+v\nwant %+v", got, def)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
