package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"damselfly/fusemount"
	"damselfly/integration/harness"
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

	registry  *harness.Registry
	regHost   string // "127.0.0.1:PORT"
	scheduler *harness.Proc
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
	peer     *harness.Proc
	proxy    string // the peer's HTTP base URL
	mounts   []*mount
}

// mount is one mount daemon process.
type mount struct {
	n   *node
	im  *image
	dir string
	p   *harness.Proc
}

// startRegistry runs docker-registry on a free loopback port with storage
// in the run's directory.
func (c *cluster) startRegistry(ctx context.Context) error {
	r, err := harness.StartRegistry(ctx, harness.RegistryConfig{Dir: filepath.Join(c.dir, "registry"), LogDir: c.logs, OwnGroup: true})
	if err != nil {
		return err
	}
	c.registry, c.regHost = r, r.Host()
	return nil
}

// start runs a child in its own process group (see
// harness.ProcConfig.OwnGroup), logging into the run's log directory.
func (c *cluster) start(name, path string, args ...string) (*harness.Proc, error) {
	return harness.Start(harness.ProcConfig{Name: name, LogDir: c.logs, Path: path, Args: args, OwnGroup: true})
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
	p, err := c.start("scheduler", c.binary, "--config", cfg, "--dir", dir, "scheduler")
	if err != nil {
		return err
	}
	c.scheduler = p
	if c.schedAddr, err = p.WaitLine("listening ", 30*time.Second); err != nil {
		return err
	}
	c.schedURL, err = p.WaitLine("admin ", 10*time.Second)
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
	p, err := c.start(name+"-peer", c.binary, "--config", cfg, "peer")
	if err != nil {
		return err
	}
	n.peer = p
	c.nodes = append(c.nodes, n)
	if _, err := p.WaitLine("listening ", 30*time.Second); err != nil {
		return err
	}
	n.proxy, err = p.WaitLine("proxy ", 10*time.Second)
	return err
}

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
	p, err := c.start(n.name+"-mount-"+im.name, c.binary, "--config", cfg, "mount", im.ref(c.regHost), m.dir)
	if err != nil {
		return err
	}
	m.p = p
	n.mounts = append(n.mounts, m)
	return harness.WaitMounted(ctx, p, m.dir, 60*time.Second)
}

// unmount unmounts m and waits for its daemon to exit, which it must do on
// its own when its mountpoint goes.
func (m *mount) unmount() error {
	if m.p == nil {
		return nil
	}
	if m.p.Exited() {
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
		return fmt.Errorf("%s had exited before shutdown: %v", m.p.Name(), m.p.Err())
	}
	return harness.Unmount(m.p, m.dir)
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
	stop := func(p *harness.Proc) {
		if p == nil {
			return
		}
		if p.Exited() {
			errs = append(errs, fmt.Errorf("%s had exited before shutdown: %v", p.Name(), p.Err()))
			return
		}
		errs = append(errs, p.Stop())
	}
	for _, n := range c.nodes {
		stop(n.peer)
	}
	stop(c.scheduler)
	if c.registry != nil {
		errs = append(errs, c.registry.Stop())
	}
	return errors.Join(errs...)
}

// daemons lists every process the sampler watches, with a role and a node.
func (c *cluster) daemons() []daemon {
	var ds []daemon
	if c.scheduler != nil {
		ds = append(ds, daemon{Role: "scheduler", Name: "scheduler", p: c.scheduler, metrics: c.schedURL + "/metrics"})
	}
	for _, n := range c.nodes {
		ds = append(ds, daemon{Role: "peer", Node: n.name, Name: n.peer.Name(), p: n.peer, metrics: n.proxy + "/metrics"})
		for _, m := range n.mounts {
			ds = append(ds, daemon{Role: "mount", Node: n.name, Name: m.p.Name(), p: m.p, socket: fusemount.SocketPath(m.dir)})
		}
	}
	return ds
}
