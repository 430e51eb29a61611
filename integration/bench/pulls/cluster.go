package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"damselfly/integration/harness"
	"damselfly/peer/host"
)

// Modes (-mode).
const (
	modeP2P = "p2p"
	// modeOrigin is "the same with no P2P": the same peer daemons and
	// mirrors with no scheduler, so each node's mirror pulls every blob
	// from the origin itself.
	modeOrigin = "origin"
)

// mirrorAddr is where every node's peer serves its mirror: the default
// proxy.listen, on the loopback of the node's namespace.
const mirrorAddr = "127.0.0.1:7950"

const startTimeout = 60 * time.Second // a daemon's readiness line

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
	b   *rig
	net *net
	dir string

	registry  *harness.Registry
	scheduler *harness.Proc
	schedAddr string
	nodes     []*node
}

// node is one machine's peer daemon, in the node's namespace.
type node struct {
	h    *harness.Host
	dir  string
	peer *harness.Proc
}

// deploy starts the origin registry in its namespace, the scheduler
// (P2P only) and every node's peer, and waits for each to be ready. On
// error what started is stopped.
func (b *rig) deploy(ctx context.Context, nt *net, mode, dir string) (_ *deployment, err error) {
	d := &deployment{b: b, net: nt, dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.stop())
		}
	}()
	d.registry, err = harness.StartRegistry(ctx, harness.RegistryConfig{Dir: b.regDir, LogDir: dir, OwnGroup: true, Host: nt.origin,
		AccessLog: true}) // which blobs the origin sent, and how often
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
	d.nodes = make([]*node, len(nt.nodes))
	var wg sync.WaitGroup
	errs := make([]error, len(nt.nodes))
	for i, h := range nt.nodes {
		d.nodes[i] = &node{h: h, dir: filepath.Join(dir, h.Name())}
		wg.Go(func() { errs[i] = d.startPeer(d.nodes[i], key) })
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

// startPeer starts n's peer on the node's address with its mirror on
// mirrorAddr, the origin as its default registry (skopeo cannot name
// the upstream registry with ?ns=, so the mirror serves its default
// one), configured as configs/peer.yaml tells an operator: only the
// keys a deployment must set.
func (d *deployment) startPeer(n *node, key string) error {
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
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
  listen: %s
registry:
  default_registry: http://%s
  plain_http: [%q]
scheduler:
  schedulers: %s
labels:
  host: %s
`, filepath.Join(n.dir, "state"), n.h.Addr(), key, filepath.Join(n.dir, "cache"), mirrorAddr, regHost, regHost, scheds, n.h.Name())
	cfg := filepath.Join(n.dir, "peer.yaml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		return err
	}
	p, err := d.start(n.h.Name()+"-peer", n.h, "--config", cfg, "peer")
	if err != nil {
		return err
	}
	n.peer = p
	if _, err := p.WaitLine("listening ", startTimeout); err != nil {
		return err
	}
	_, err = p.WaitLine("proxy ", startTimeout)
	return err
}

// stop stops peers, scheduler and registry, in reverse order of start.
// Every process that did not stop cleanly, or had died before, is an
// error.
func (d *deployment) stop() error {
	var mu sync.Mutex
	var errs []error
	add := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
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
	var wg sync.WaitGroup
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

// logTails is the last lines of every peer's log, for an error.
func (d *deployment) logTails() string {
	var b strings.Builder
	for _, n := range d.nodes {
		if n.peer != nil {
			fmt.Fprintf(&b, "--- %s (%s)\n%s\n", n.peer.Name(), n.peer.Log(), n.peer.LogTail(800))
		}
	}
	return b.String()
}
