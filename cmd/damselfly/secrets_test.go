package main

import (
	schedd "damselfly/scheduler/daemon"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The secrets of these tests: backend.auth is base64 of
// "alice:" + printSecretPassword, and the proxy URL carries
// printSecretProxyPassword.
const (
	printSecretPassword      = "hunter2-auth-secret"
	printSecretAuth          = "YWxpY2U6aHVudGVyMi1hdXRoLXNlY3JldA=="
	printSecretProxyPassword = "proxy-pass-secret"
)

// `mount --print-config` shows backend.auth as REDACTED and the proxy
// URL without its password, whether they come from the file or the
// environment.
func TestPrintConfigRedactsSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "mount.yaml")
	yml := `backend:
  host: registry.example.com
  repo: team/app
  auth: ` + printSecretAuth + `
  proxy:
    url: http://bob:` + printSecretProxyPassword + `@127.0.0.1:7950
`
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env  []string
		args []string
	}{
		"file": {nil, []string{"--config", file, "mount", "--print-config", "docker://registry.example.com/team/app:v1", dir}},
		"environment": {[]string{"DAMSELFLY_BACKEND_AUTH=" + printSecretAuth, "DAMSELFLY_BACKEND_PROXY_URL=http://bob:" + printSecretProxyPassword + "@127.0.0.1:7950"},
			[]string{"mount", "--print-config", "docker://registry.example.com/team/app:v1", dir}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := mustRun(t, tc.env, tc.args...)
			out := r.stdout + r.stderr
			for _, s := range []string{printSecretAuth, printSecretPassword, printSecretProxyPassword} {
				if strings.Contains(out, s) {
					t.Errorf("--print-config shows the secret %q:\n%s", s, out)
				}
			}
			for _, want := range []string{"auth: REDACTED", "127.0.0.1:7950"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("--print-config: no %q in\n%s", want, r.stdout)
				}
			}
		})
	}
}

// `scheduler --print-config` names the cluster key file, never its
// contents. (It always did; this keeps it so.)
func TestSchedulerPrintConfigHidesClusterKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "cluster.key")
	mustRun(t, nil, "peer", "keygen", key)
	data, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, nil, "scheduler", "--dir", dir, "--print-config")
	if !strings.Contains(r.stdout, key) {
		t.Errorf("--print-config does not name the key file %s:\n%s", key, r.stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if len(line) >= 16 && strings.Contains(r.stdout+r.stderr, line) {
			t.Errorf("--print-config shows the cluster key's line %q", line)
		}
	}
}

// The scheduler's state directory, which holds its identity and the
// cluster key, is made 0700 when found looser, with a log line.
func TestSchedulerStateDirTightened(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	if err := prepareSchedulerDir(dir, schedd.Default(dir), slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("state directory: got mode %v, want 0700", got)
	}
	if !strings.Contains(logs.String(), "made it 0700") {
		t.Errorf("the log does not say so:\n%s", logs.String())
	}
}

// `snapshotter --print-config` shows the file's settings, and mount.peer
// without its password.
func TestSnapshotterPrintConfig(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "snapshotter.yaml")
	yml := `root: /srv/snapshotter
mount:
  peer: http://bob:` + printSecretProxyPassword + `@127.0.0.1:7950
advanced:
  check_interval: 2s
`
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, nil, "--config", file, "snapshotter", "--print-config")
	if strings.Contains(r.stdout+r.stderr, printSecretProxyPassword) {
		t.Errorf("--print-config shows the peer's password:\n%s", r.stdout)
	}
	for _, want := range []string{"root: /srv/snapshotter", "127.0.0.1:7950", "check_interval: 2s", "address: /run/damselfly/snapshotter.sock"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--print-config: no %q in\n%s", want, r.stdout)
		}
	}
}
