package cluster

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

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
			// 401: it answers, and wants credentials (requireAuth).
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
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

// requireAuth restarts the registry with htpasswd authentication: from
// then on only user with pass may pull (or push) anything.
func (r *registry) requireAuth(user, pass string) {
	r.t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		r.t.Fatal(err)
	}
	htpasswd := filepath.Join(filepath.Dir(r.config), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		r.t.Fatal(err)
	}
	yml, err := os.ReadFile(r.config)
	if err != nil {
		r.t.Fatal(err)
	}
	yml = append(yml, fmt.Sprintf("auth:\n  htpasswd:\n    realm: damselfly-test\n    path: %q\n", htpasswd)...)
	if err := os.WriteFile(r.config, yml, 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.down()
	r.up()
}
