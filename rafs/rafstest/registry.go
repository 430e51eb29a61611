package rafstest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// registryStartTimeout bounds how long StartRegistry waits for the
// registry to answer; it starts in well under a second.
const registryStartTimeout = 15 * time.Second

// StartRegistry runs a Docker distribution registry (the docker-registry
// binary, Debian's package of distribution v2) on a free port of
// 127.0.0.1, with filesystem storage in a temporary directory and no
// authentication, and returns its "127.0.0.1:PORT". It skips (or fails, see
// SkipOrFail) when docker-registry is not installed, fails t when the
// registry does not answer GET /v2/ in time, and stops the registry in
// t.Cleanup. Each call starts its own registry, so tests may run in
// parallel. References to it need no --insecure: transport talks plain HTTP
// to loopback hosts.
func StartRegistry(t testing.TB) (host string) {
	t.Helper()
	RequireTool(t, "docker-registry")
	dir := t.TempDir()
	var last error
	// The port is found free and then given to the registry, so another
	// process may take it in between; try again with a new one if so.
	for range 3 {
		host, err := startRegistry(t, dir)
		if err == nil {
			return host
		}
		last = err
	}
	t.Fatalf("start docker-registry: %v", last)
	return ""
}

func startRegistry(t testing.TB, dir string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	storage, err := os.MkdirTemp(dir, "storage-")
	if err != nil {
		return "", err
	}
	config := filepath.Join(dir, fmt.Sprintf("config-%d.yml", port))
	yml := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
http:
  addr: %q
`, storage, host)
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		return "", err
	}

	cmd := exec.Command("docker-registry", "serve", config)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), registryStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return "", fmt.Errorf("docker-registry on %s exited: %v; output:\n%s", host, waitErr, out.String())
		case <-ctx.Done():
			stop()
			return "", fmt.Errorf("docker-registry on %s did not answer GET /v2/ within %s; output:\n%s", host, registryStartTimeout, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get("http://" + host + "/v2/")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("docker-registry on %s output:\n%s", host, out.String())
		}
	})
	return host, nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer collects a process's output for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
