package cluster

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

// registry is a docker-registry (Debian's distribution package) on a
// loopback port with storage in the test's temporary directory. It can be
// stopped and started again on the same port with the same content, which
// is how scenarios play an outage.
type registry struct {
	t      testing.TB
	host   string // "127.0.0.1:PORT"
	config string
	p      *proc
	n      int
}

func startRegistry(t testing.TB) *registry {
	t.Helper()
	rafstest.RequireTool(t, "docker-registry")
	dir := t.TempDir()
	// A free port is found and then handed over, so another process may
	// take it in between: try a few.
	var lastErr error
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		host := ln.Addr().String()
		ln.Close()
		r := &registry{t: t, host: host, config: filepath.Join(dir, "config.yml")}
		yml := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
http:
  addr: %q
`, filepath.Join(dir, "storage"), host)
		if err := os.WriteFile(r.config, []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		if lastErr = r.startOnce(); lastErr == nil {
			return r
		}
	}
	t.Fatalf("start docker-registry: %v", lastErr)
	return nil
}

// startOnce starts the registry process and waits until it answers.
func (r *registry) startOnce() error {
	r.n++
	r.p = startCmd(r.t, fmt.Sprintf("registry-%d", r.n), "docker-registry", "serve", r.config)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + r.host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if r.p.exited() {
			return fmt.Errorf("docker-registry exited: %v", r.p.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.p.kill()
	return fmt.Errorf("docker-registry did not answer on %s", r.host)
}

// down stops the registry: connections to its port are refused.
func (r *registry) down() { r.p.stop() }

// up starts it again on the same port with the same content.
func (r *registry) up() {
	r.t.Helper()
	if err := r.startOnce(); err != nil {
		r.t.Fatal(err)
	}
}
