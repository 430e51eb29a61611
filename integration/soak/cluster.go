package main

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
	"sync"
	"syscall"
	"time"

	"damselfly/fusemount"
	"damselfly/peer/host"
)

// cluster is every process of the run: the origin registry, a scheduler,
// one peer daemon per node and one mount daemon per image per node. Every
// address is on 127.0.0.1.
type cluster struct {
	dir    string // the run's work directory
	logs   string // process logs
	binary string // damselfly built from the tree
	key    string // the cluster key file
	direct bool   // node caches with direct I/O (cache.direct_io)

	registry  *proc
	regHost   string // "127.0.0.1:PORT"
	scheduler *proc
	schedAddr string // multiaddr with /p2p/ID
	schedURL  string // admin API base URL
	nodes     []*node

	closeOnce sync.Once
	closeErr  error
}

// node is one machine: a peer daemon and its node cache, and the mounts
// that share that cache.
type node struct {
	name     string
	dir      string
	cache    string
	capacity int64
	peer     *proc
	proxy    string // the peer's HTTP base URL
	mounts   []*mount
}

// mount is one mount daemon process.
type mount struct {
	n   *node
	im  *image
	dir string
	p   *proc
}

// startRegistry runs docker-registry on a free loopback port with storage
// in the run's directory. The port is found free and then handed over, so
// another process may take it in between: a few tries.
func (c *cluster) startRegistry(ctx context.Context) error {
	bin, err := lookPath("docker-registry")
	if err != nil {
		return err
	}
	var last error
	for try := range 3 {
		port, err := freePort()
		if err != nil {
			return err
		}
		host := fmt.Sprintf("127.0.0.1:%d", port)
		cfg := filepath.Join(c.dir, "registry.yml")
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
`, filepath.Join(c.dir, "registry"), host)
		if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
			return err
		}
		p, err := startProc(c.logs, fmt.Sprintf("registry-%d", try), bin, "serve", cfg)
		if err != nil {
			return err
		}
		if last = waitHTTP(ctx, p, "http://"+host+"/v2/", 15*time.Second); last == nil {
			c.registry, c.regHost = p, host
			return nil
		}
		p.stop()
	}
	return fmt.Errorf("docker-registry: %w", last)
}

// waitHTTP polls url until it answers 200, p exits, or timeout passes.
func waitHTTP(ctx context.Context, p *proc, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %v:\n%s", p.name, p.err, p.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no answer from %s: %w", p.name, url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startScheduler writes the cluster key and runs the scheduler.
func (c *cluster) startScheduler() error {
	c.key = filepath.Join(c.dir, "cluster.key")
	if err := host.CreateClusterKeyFile(c.key); err != nil {
		return err
	}
	dir := filepath.Join(c.dir, "scheduler")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "scheduler.yaml")
	yml := fmt.Sprintf(`host:
  identity_file: %s
  listen_addrs: ["/ip4/127.0.0.1/tcp/0"]
  cluster_key_file: %s
admin:
  listen: 127.0.0.1:0
`, filepath.Join(dir, "identity.key"), c.key)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		return err
	}
	p, err := startProc(c.logs, "scheduler", c.binary, "--config", cfg, "--dir", dir, "scheduler")
	if err != nil {
		return err
	}
	c.scheduler = p
	if c.schedAddr, err = p.waitLine("listening ", 30*time.Second); err != nil {
		return err
	}
	c.schedURL, err = p.waitLine("admin ", 10*time.Second)
	return err
}

// addNode starts a node's peer daemon with a node cache of capacity bytes.
// Timeouts are the shipped defaults: the soak is about steady state, not
// fault recovery.
func (c *cluster) addNode(name string, capacity int64) error {
	n := &node{name: name, dir: filepath.Join(c.dir, name), capacity: capacity}
	n.cache = filepath.Join(n.dir, "cache")
	yml := fmt.Sprintf(`dir: %s
host:
  listen_addrs: ["/ip4/127.0.0.1/tcp/0"]
  cluster_key_file: %s
cache:
  dir: %s
  capacity: %d
  direct_io: %t
proxy:
  listen: 127.0.0.1:0
registry:
  default_registry: http://%s
scheduler:
  schedulers: ["%s"]
labels:
  host: %s
`, n.dir, c.key, n.cache, capacity, c.direct, c.regHost, c.schedAddr, name)
	cfg := filepath.Join(c.dir, name+"-peer.yaml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		return err
	}
	p, err := startProc(c.logs, name+"-peer", c.binary, "--config", cfg, "peer")
	if err != nil {
		return err
	}
	n.peer = p
	c.nodes = append(c.nodes, n)
	if _, err := p.waitLine("listening ", 30*time.Second); err != nil {
		return err
	}
	n.proxy, err = p.waitLine("proxy ", 10*time.Second)
	return err
}

// fuseSuperMagic is statfs's f_type of a FUSE filesystem.
const fuseSuperMagic = 0x65735546

// mount starts `damselfly mount` of im on n through n's peer (falling
// back to the registry when the peer is unhealthy, as deployed) and waits
// until the filesystem answers. The memory cache is the smallest allowed
// and prefetch is off, so that reads keep going to the node cache and the
// peer.
func (c *cluster) mount(ctx context.Context, n *node, im *image) error {
	m := &mount{n: n, im: im, dir: filepath.Join(n.dir, "mnt", im.name)}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return err
	}
	yml := fmt.Sprintf(`backend:
  type: registry
  proxy:
    url: %s
    fallback: true
cache:
  dir: %s
  capacity: %d
  direct_io: %t
prefetch:
  enable: false
memory_bytes: 1048576
advanced:
  backend:
    proxy:
      ping_url: %s/healthz
`, n.proxy, n.cache, n.capacity, c.direct, n.proxy)
	cfg := filepath.Join(n.dir, "mount-"+im.name+".yaml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		return err
	}
	p, err := startProc(c.logs, n.name+"-mount-"+im.name, c.binary, "--config", cfg, "mount", im.ref(c.regHost), m.dir)
	if err != nil {
		return err
	}
	m.p = p
	n.mounts = append(n.mounts, m)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sfs syscall.Statfs_t
		if syscall.Statfs(m.dir, &sfs) == nil && sfs.Type == fuseSuperMagic {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %v:\n%s", p.name, p.err, p.logTail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: mount did not come up", p.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unmount unmounts m and waits for its daemon to exit, which it must do on
// its own when its mountpoint goes.
func (m *mount) unmount() error {
	if m.p == nil {
		return nil
	}
	if m.p.exited() {
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
		return fmt.Errorf("%s had exited before shutdown: %v", m.p.name, m.p.err)
	}
	if err := fusemount.Unmount(m.dir); err != nil {
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
		return errors.Join(fmt.Errorf("unmount %s: %w", m.dir, err), m.p.stop())
	}
	select {
	case <-m.p.done:
		return nil
	case <-time.After(stopTimeout):
		return errors.Join(fmt.Errorf("%s did not exit after its unmount", m.p.name), m.p.stop())
	}
}

// close stops everything in reverse order of start: mounts (in parallel),
// peers, scheduler, registry. It reports every process that did not stop
// cleanly, or had died before. Calls after the first return its result.
func (c *cluster) close() error {
	c.closeOnce.Do(func() { c.closeErr = c.stopAll() })
	return c.closeErr
}

func (c *cluster) stopAll() error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		for _, m := range n.mounts {
			wg.Go(func() {
				if err := m.unmount(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	stop := func(p *proc) {
		if p == nil {
			return
		}
		if p.exited() {
			errs = append(errs, fmt.Errorf("%s had exited before shutdown: %v", p.name, p.err))
			return
		}
		errs = append(errs, p.stop())
	}
	for _, n := range c.nodes {
		stop(n.peer)
	}
	stop(c.scheduler)
	stop(c.registry)
	return errors.Join(errs...)
}

// daemons lists every process the sampler watches, with a role and a node.
func (c *cluster) daemons() []daemon {
	var ds []daemon
	if c.scheduler != nil {
		ds = append(ds, daemon{Role: "scheduler", Name: "scheduler", p: c.scheduler, metrics: c.schedURL + "/metrics"})
	}
	for _, n := range c.nodes {
		ds = append(ds, daemon{Role: "peer", Node: n.name, Name: n.peer.name, p: n.peer, metrics: n.proxy + "/metrics"})
		for _, m := range n.mounts {
			ds = append(ds, daemon{Role: "mount", Node: n.name, Name: m.p.name, p: m.p, socket: fusemount.SocketPath(m.dir)})
		}
	}
	return ds
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lookPath finds a required system tool, saying how to get it.
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is required (make deps installs it): %w", name, err)
	}
	return strings.TrimSpace(p), nil
}
