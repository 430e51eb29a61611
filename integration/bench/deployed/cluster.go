package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"damselfly/integration/harness"
	"damselfly/peer/host"
)

// Modes (-mode).
const (
	modeP2P = "p2p"
	// modeOrigin is the in-process distribution harness's baseline
	// (-p2p=false): the same peer daemons with no scheduler, so each
	// node's misses go from its node cache straight to the origin.
	modeOrigin = "origin"
	// modePull is what a node without damselfly does: skopeo copies the
	// image's plain (gzip) layers from the origin into an OCI layout and
	// umoci unpacks it, then the same readers read the unpacked tree.
	// No peers, no scheduler.
	modePull = "pull"
)

// Bounds on each step of a run.
const (
	startTimeout = 60 * time.Second // a daemon's readiness line, a mount coming up
	stepTimeout  = 15 * time.Minute // one conversion, the strace run
)

// net is one Net and its hosts for a node count: the origin, the
// scheduler and the nodes, every link capped at the same rate.
type net struct {
	n      *harness.Net
	origin *harness.Host
	sched  *harness.Host
	nodes  []*harness.Host
}

func newNet(ctx context.Context, nodes int, rate int64) (_ *net, err error) {
	n, err := harness.NewNet(ctx)
	if err != nil {
		return nil, err
	}
	nt := &net{n: n}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
		}
	}()
	link := harness.Capped(rate)
	if nt.origin, err = n.AddHost(ctx, "origin", link); err != nil {
		return nil, err
	}
	if nt.sched, err = n.AddHost(ctx, "sched", link); err != nil {
		return nil, err
	}
	for i := range nodes {
		h, err := n.AddHost(ctx, fmt.Sprintf("node%d", i+1), link)
		if err != nil {
			return nil, err
		}
		nt.nodes = append(nt.nodes, h)
	}
	return nt, nil
}

// deployment is every process of one run.
type deployment struct {
	b    *rig
	net  *net
	dir  string
	mode string

	registry  *harness.Registry
	scheduler *harness.Proc
	schedAddr string
	nodes     []*node
}

// node is one machine: its peer daemon and its mount daemon, sharing the
// node cache, both in the node's namespace.
type node struct {
	h     *harness.Host
	dir   string
	peer  *harness.Proc
	proxy string // the peer's HTTP endpoint, on 127.0.0.1 in the namespace
	mount *harness.Proc
	mnt   string
}

// deploy starts, in order, the origin registry in its namespace, the
// scheduler (P2P only), and on every node its peer and then its mount
// through that peer, and waits until every mount answers. On error
// what started is stopped.
func (b *rig) deploy(ctx context.Context, nt *net, mode, dir, regDir string, bi *benchImage) (_ *deployment, err error) {
	d := &deployment{b: b, net: nt, dir: dir, mode: mode}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.stop())
		}
	}()
	d.registry, err = harness.StartRegistry(ctx, harness.RegistryConfig{Dir: regDir, LogDir: dir, OwnGroup: true, Host: nt.origin})
	if err != nil {
		return nil, err
	}
	key := filepath.Join(dir, "cluster.key")
	if err := host.CreateClusterKeyFile(key); err != nil {
		return nil, err
	}
	if mode == modeP2P {
		if err := d.startScheduler(key); err != nil {
			return nil, err
		}
	}
	// Peers and mounts start node by node in parallel: on 8 nodes their
	// start-up is most of a run's setup.
	d.nodes = make([]*node, len(nt.nodes))
	var wg sync.WaitGroup
	errs := make([]error, len(nt.nodes))
	for i, h := range nt.nodes {
		d.nodes[i] = &node{h: h, dir: filepath.Join(dir, h.Name())}
		if mode == modePull {
			// skopeo writes DIR/pull, umoci DIR/bundle; readers read
			// the unpacked tree.
			d.nodes[i].mnt = filepath.Join(d.nodes[i].dir, "bundle", "rootfs")
			errs[i] = os.MkdirAll(d.nodes[i].dir, 0o755)
			continue
		}
		wg.Go(func() { errs[i] = d.startNode(ctx, d.nodes[i], key, bi) })
	}
	wg.Wait()
	return d, errors.Join(errs...)
}

func (d *deployment) start(name string, h *harness.Host, args ...string) (*harness.Proc, error) {
	return harness.Start(harness.ProcConfig{Name: name, LogDir: d.dir, Path: d.b.bin, Args: args, OwnGroup: true, Netns: h.Netns()})
}

// startScheduler runs the scheduler on its host's address.
func (d *deployment) startScheduler(key string) error {
	dir := filepath.Join(d.dir, "scheduler")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "scheduler.yaml")
	yml := fmt.Sprintf(`host:
  identity_file: %s
  listen_addrs: ["/ip4/%s/tcp/0"]
  cluster_key_file: %s
admin:
  listen: 127.0.0.1:0
`, filepath.Join(dir, "identity.key"), d.net.sched.Addr(), key)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		return err
	}
	p, err := d.start("scheduler", d.net.sched, "--config", cfg, "--dir", dir, "scheduler")
	if err != nil {
		return err
	}
	d.scheduler = p
	d.schedAddr, err = p.WaitLine("listening ", startTimeout)
	return err
}

// startNode starts n's peer on the node's address (its proxy on the
// namespace's 127.0.0.1), then its mount of bi through that peer,
// configured as configs/peer.yaml and configs/mount.yaml tell an
// operator: only the keys a deployment must set.
func (d *deployment) startNode(ctx context.Context, n *node, key string, bi *benchImage) error {
	n.mnt = filepath.Join(n.dir, "mnt")
	cache := filepath.Join(n.dir, "cache")
	if err := os.MkdirAll(n.mnt, 0o755); err != nil {
		return err
	}
	regHost := d.registry.Host()
	scheds := "[]"
	if d.schedAddr != "" {
		scheds = fmt.Sprintf("[%q]", d.schedAddr)
	}
	yml := fmt.Sprintf(`dir: %s
host:
  listen_addrs: ["/ip4/%s/tcp/0"]
  cluster_key_file: %s
cache:
  dir: %s
proxy:
  listen: 127.0.0.1:0
registry:
  default_registry: http://%s
  plain_http: [%q]
scheduler:
  schedulers: %s
labels:
  host: %s
`, filepath.Join(n.dir, "state"), n.h.Addr(), key, cache, regHost, regHost, scheds, n.h.Name())
	pcfg := filepath.Join(n.dir, "peer.yaml")
	if err := os.WriteFile(pcfg, []byte(yml), 0o600); err != nil {
		return err
	}
	p, err := d.start(n.h.Name()+"-peer", n.h, "--config", pcfg, "peer")
	if err != nil {
		return err
	}
	n.peer = p
	if _, err := p.WaitLine("listening ", startTimeout); err != nil {
		return err
	}
	if n.proxy, err = p.WaitLine("proxy ", startTimeout); err != nil {
		return err
	}
	myml := fmt.Sprintf(`backend:
  type: registry
  proxy:
    url: %s
    fallback: true
cache:
  dir: %s
%s
`, n.proxy, cache, d.b.o.mountYAML)
	mcfg := filepath.Join(n.dir, "mount.yaml")
	if err := os.WriteFile(mcfg, []byte(myml), 0o600); err != nil {
		return err
	}
	m, err := d.start(n.h.Name()+"-mount", n.h, "--config", mcfg, "mount", "--insecure",
		"docker://"+regHost+"/"+bi.Repo+":rafs", n.mnt)
	if err != nil {
		return err
	}
	n.mount = m
	return harness.WaitMounted(ctx, m, n.mnt, startTimeout)
}

// stop stops everything in reverse order of start: mounts (unmounted,
// in parallel), peers, scheduler, registry. Every process that did not
// stop cleanly, or had died before, is an error.
func (d *deployment) stop() error {
	var mu sync.Mutex
	var errs []error
	add := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, n := range d.nodes {
		if n == nil || n.mount == nil {
			continue
		}
		wg.Go(func() {
			if n.mount.Exited() {
				syscall.Unmount(n.mnt, syscall.MNT_DETACH)
				add(fmt.Errorf("%s had exited before shutdown: %v", n.mount.Name(), n.mount.Err()))
				return
			}
			add(harness.Unmount(n.mount, n.mnt))
		})
	}
	wg.Wait()
	stop := func(p *harness.Proc) {
		if p == nil {
			return
		}
		if p.Exited() {
			add(fmt.Errorf("%s had exited before shutdown: %v", p.Name(), p.Err()))
			return
		}
		add(p.Stop())
	}
	for _, n := range d.nodes {
		if n != nil {
			wg.Go(func() { stop(n.peer) })
		}
	}
	wg.Wait()
	stop(d.scheduler)
	if d.registry != nil {
		add(d.registry.Stop())
	}
	return errors.Join(errs...)
}

// logTails is the last lines of every log of the run, for an error.
func (d *deployment) logTails() string {
	var b strings.Builder
	for _, n := range d.nodes {
		for _, p := range []*harness.Proc{n.peer, n.mount} {
			if p != nil {
				fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.Name(), p.Log(), p.LogTail(800))
			}
		}
	}
	return b.String()
}
