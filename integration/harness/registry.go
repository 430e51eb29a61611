package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// RegistryConfig configures a docker-registry origin.
type RegistryConfig struct {
	// Dir holds the configuration, the storage and the htpasswd file.
	Dir string
	// LogDir holds the process logs, one per start (registry-1.log,
	// registry-2.log, ...); "" is Dir.
	LogDir string
	// AccessLog keeps the registry's access log (combined log format, on
	// its stdout, so in Proc().Log()); off, only warnings are logged.
	AccessLog bool
	// Delete allows DELETE of manifests and blobs.
	Delete bool
	// OwnGroup is passed to ProcConfig.
	OwnGroup bool
	// Host, if set, is the Net host the registry runs in, listening on
	// the host's address: only hosts of its Net reach it (HTTPClient
	// dials from its host). Its storage is Dir's, so an image can be put
	// in through a loopback registry on the same Dir, stopped before
	// this one starts.
	Host *Host
}

// readyTimeout bounds how long a starting registry has to answer.
const readyTimeout = 15 * time.Second

// Registry is docker-registry (Debian's distribution v2 package) on a
// loopback port (or a Net host's address) with filesystem storage. It can be stopped and started
// again on the same port with the same content, which is how scenarios
// play an outage. Its methods are not safe for concurrent use.
type Registry struct {
	cfg    RegistryConfig
	host   string // "127.0.0.1:PORT" or "HOSTADDR:PORT"
	config string
	auth   bool
	p      *Proc
	n      int // starts so far
}

// StartRegistry starts a registry on a free port of 127.0.0.1, or of
// cfg.Host's address, and waits until it answers. docker-registry must be on PATH.
func StartRegistry(ctx context.Context, cfg RegistryConfig) (*Registry, error) {
	if _, err := exec.LookPath("docker-registry"); err != nil {
		return nil, fmt.Errorf("docker-registry is required (make deps installs it): %w", err)
	}
	if cfg.LogDir == "" {
		cfg.LogDir = cfg.Dir
	}
	for _, d := range []string{cfg.Dir, cfg.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// A free port is found and then handed over, so another process may
	// take it in between: try a few.
	var last error
	for range 3 {
		host, err := freeHost(cfg.Host)
		if err != nil {
			return nil, err
		}
		r := &Registry{cfg: cfg, host: host, config: filepath.Join(cfg.Dir, "config.yml")}
		if err := os.WriteFile(r.config, []byte(r.yaml()), 0o644); err != nil {
			return nil, err
		}
		if last = r.Up(ctx); last == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("start docker-registry: %w", last)
}

func (r *Registry) yaml() string {
	var b strings.Builder
	b.WriteString("version: 0.1\nlog:\n  level: warn\n")
	if !r.cfg.AccessLog {
		b.WriteString("  accesslog:\n    disabled: true\n")
	}
	fmt.Fprintf(&b, "storage:\n  filesystem:\n    rootdirectory: %q\n", filepath.Join(r.cfg.Dir, "storage"))
	if r.cfg.Delete {
		b.WriteString("  delete:\n    enabled: true\n")
	}
	fmt.Fprintf(&b, "http:\n  addr: %q\n", r.host)
	return b.String()
}

// Host is "127.0.0.1:PORT" (or "HOSTADDR:PORT" in a Net host), the
// same across restarts.
func (r *Registry) Host() string { return r.host }

// HTTPClient is a client that reaches the registry: from its Net host
// if it has one, else http.DefaultClient.
func (r *Registry) HTTPClient() *http.Client {
	if r.cfg.Host != nil {
		return r.cfg.Host.HTTPClient()
	}
	return http.DefaultClient
}

// Proc is the current registry process.
func (r *Registry) Proc() *Proc { return r.p }

// Up starts the registry process (again) and waits until it answers
// GET /v2/ with 200, or 401 once RequireAuth was called.
func (r *Registry) Up(ctx context.Context) error {
	r.n++
	p, err := Start(ProcConfig{Name: fmt.Sprintf("registry-%d", r.n), LogDir: r.cfg.LogDir, Path: "docker-registry",
		Args: []string{"serve", r.config}, OwnGroup: r.cfg.OwnGroup, Netns: netnsOf(r.cfg.Host)})
	if err != nil {
		return err
	}
	r.p = p
	ok := func(code int) bool {
		return code == http.StatusOK || r.auth && code == http.StatusUnauthorized
	}
	if err := WaitHTTPFrom(ctx, r.cfg.Host, p, "http://"+r.host+"/v2/", ok, readyTimeout); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// Down stops the registry: connections to its port are refused. It
// reports a registry that had to be killed.
func (r *Registry) Down() error { return r.p.Stop() }

// Stop is Down, for the end of a run; it also reports a registry that
// had died on its own.
func (r *Registry) Stop() error {
	if r.p.Exited() {
		return fmt.Errorf("%s had exited before shutdown: %v", r.p.Name(), r.p.Err())
	}
	return r.p.Stop()
}

// RequireAuth restarts the registry with htpasswd authentication: from
// then on only user with pass may pull (or push) anything.
func (r *Registry) RequireAuth(ctx context.Context, user, pass string) error {
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		return err
	}
	htpasswd := filepath.Join(r.cfg.Dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		return err
	}
	yml := r.yaml() + fmt.Sprintf("auth:\n  htpasswd:\n    realm: damselfly-test\n    path: %q\n", htpasswd)
	if err := os.WriteFile(r.config, []byte(yml), 0o644); err != nil {
		return err
	}
	r.auth = true
	return errors.Join(r.Down(), r.Up(ctx))
}

// WaitHTTP polls url until it answers with a status ok accepts (nil: 200
// only), p exits, ctx ends or timeout passes.
func WaitHTTP(ctx context.Context, p *Proc, url string, ok func(int) bool, timeout time.Duration) error {
	return WaitHTTPFrom(ctx, nil, p, url, ok, timeout)
}

// WaitHTTPFrom is WaitHTTP with the requests made from Net host h, for
// a process listening in a host (nil: from the harness's namespace).
func WaitHTTPFrom(ctx context.Context, h *Host, p *Proc, url string, ok func(int) bool, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	if h != nil {
		client.Transport = h.HTTPClient().Transport
		defer client.CloseIdleConnections()
	}
	if ok == nil {
		ok = func(code int) bool { return code == http.StatusOK }
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if ok(resp.StatusCode) {
				return nil
			}
		}
		if p.Exited() {
			return fmt.Errorf("%s exited: %v:\n%s", p.Name(), p.Err(), p.LogTail(3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no answer from %s: %w", p.Name(), url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FreePort returns a port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freeHost is "ADDR:PORT" with a port that was free a moment ago, of
// 127.0.0.1 or of h's address.
func freeHost(h *Host) (string, error) {
	if h == nil {
		port, err := FreePort()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("127.0.0.1:%d", port), nil
	}
	ln, err := h.Listen("tcp", h.HostPort(0))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func netnsOf(h *Host) string {
	if h == nil {
		return ""
	}
	return h.Netns()
}
