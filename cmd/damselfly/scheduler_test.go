package main

import (
	"bufio"
	"context"
	schedd "damselfly/scheduler/daemon"
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
)

// TestSchedulerCommand starts `damselfly scheduler` as a user would,
// reads its listen and admin lines, checks /healthz, and stops it with
// SIGTERM, which must end it with exit code 0.
func TestSchedulerCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "scheduler.yaml")
	cfg := "host:\n  listen_addrs: [\"/ip4/127.0.0.1/tcp/0\"]\nadmin:\n  listen: 127.0.0.1:0\nadvanced:\n  state:\n    peer_ttl: 5s\n"
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "scheduler", "--dir", filepath.Join(dir, "state"), "--config", cfgFile)
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DAMSELFLY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	var listening []string
	var admin string
	sc := bufio.NewScanner(stdout)
	for admin == "" && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "listening "):
			listening = append(listening, strings.TrimPrefix(line, "listening "))
		case strings.HasPrefix(line, "admin "):
			admin = strings.TrimPrefix(line, "admin ")
		default:
			t.Errorf("unexpected stdout line %q", line)
		}
	}
	if admin == "" {
		t.Fatalf("no admin line; stderr:\n%s", stderr.String())
	}
	if len(listening) == 0 || !strings.HasPrefix(listening[0], "/ip4/127.0.0.1/tcp/") || !strings.Contains(listening[0], "/p2p/12D3KooW") {
		t.Errorf("listening lines %q, want /ip4/127.0.0.1/tcp/<port>/p2p/<id>", listening)
	}
	for _, f := range []string{"identity.key", "cluster.key"} {
		if _, err := os.Stat(filepath.Join(dir, "state", f)); err != nil {
			t.Errorf("state dir: %v", err)
		}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("healthz: got %d %q, want 200 ok", resp.StatusCode, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0; stderr:\n%s", err, stderr.String())
	}
}

// TestSchedulerSampleConfig loads configs/scheduler.yaml: every key must
// be known, and the values must be the defaults and validate.
func TestSchedulerSampleConfig(t *testing.T) {
	t.Parallel()
	def := schedd.Default(defaultSchedulerDir)
	got, err := configs.Load(filepath.Join("..", "..", "configs", "scheduler.yaml"), "scheduler", def)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("sample does not validate: %v", err)
	}
	if len(got.Host.AnnounceAddrs) == 0 {
		got.Host.AnnounceAddrs = nil // the sample's [] is the default's nil
	}
	if !reflect.DeepEqual(got, def) {
		t.Errorf("sample differs from the defaults:\ngot  %+v\nwant %+v", got, def)
	}
}
