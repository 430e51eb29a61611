package main

import (
	"context"
	schedd "damselfly/scheduler/daemon"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"damselfly/integration/bench/shaper"
	"damselfly/peer/daemon"
	"damselfly/peer/host"
	"damselfly/rafs/chunkapi"
	"damselfly/scheduler/server"
)

// cluster is one run's network: the origin's shaped link in front of the
// registry, a scheduler (with P2P), and the nodes, each a peer daemon
// whose way to the origin goes through a shaped link of its own and then
// the origin's.
type cluster struct {
	origin *shaper.Proxy
	links  []*shaper.Proxy // node i's link toward the origin
	sched  *server.Server  // nil without P2P
	nodes  []*daemon.Daemon
	urls   []string // where node i's readers reach its proxy

	stops []func() error // in the order of starting; run in reverse
}

// startCluster starts everything and, with P2P, waits until every node
// has joined the scheduler. On error what was started is stopped.
func startCluster(ctx context.Context, cfg Config, dir, registryAddr string, log *slog.Logger) (_ *cluster, err error) {
	c := &cluster{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	link := shaper.Config{RTT: cfg.RTT}
	link.Bandwidth = int64(cfg.originMbit() * 1e6)
	if c.origin, err = c.startShaper(registryAddr, link); err != nil {
		return nil, fmt.Errorf("origin link: %w", err)
	}
	key := filepath.Join(dir, "cluster.key")
	if err := host.CreateClusterKeyFile(key); err != nil {
		return nil, err
	}
	var schedAddr string
	if cfg.P2P {
		if schedAddr, err = c.startScheduler(cfg, filepath.Join(dir, "scheduler"), key, log); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
	}
	link.Bandwidth = int64(cfg.NodeMbit * 1e6)
	for i := range cfg.Nodes {
		name := fmt.Sprintf("node%d", i)
		l, err := c.startShaper(c.origin.Addr(), link)
		if err != nil {
			return nil, fmt.Errorf("%s link: %w", name, err)
		}
		c.links = append(c.links, l)
		if err := c.startNode(cfg, name, filepath.Join(dir, name), key, schedAddr, "http://"+l.Addr(), log); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.sched != nil {
		if err := c.waitJoined(ctx, cfg.Nodes); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// run starts f in a goroutine and registers cancelling it and waiting
// for its result as a stop.
func (c *cluster) run(f func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	c.stops = append(c.stops, func() error {
		cancel()
		return <-done
	})
}

func (c *cluster) startShaper(upstream string, link shaper.Config) (*shaper.Proxy, error) {
	p, err := shaper.New(upstream, link)
	if err != nil {
		return nil, err
	}
	c.run(p.Run)
	return p, nil
}

func (c *cluster) startScheduler(cfg Config, dir, key string, log *slog.Logger) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	scfg := schedd.Default(dir)
	scfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	scfg.Host.ClusterKeyFile = key
	scfg.Admin.Listen = "127.0.0.1:0"
	if cfg.MaxChildren != 0 {
		scfg.State.TreeMaxChildren = cfg.MaxChildren
	}
	if cfg.StarveAfter != 0 {
		scfg.State.TreeStarveAfter = cfg.StarveAfter
	}
	s, err := schedd.New(scfg, log.With("daemon", "scheduler"))
	if err != nil {
		return "", err
	}
	c.sched = s
	c.run(s.Run)
	ai := s.AddrInfo()
	if len(ai.Addrs) == 0 {
		return "", errors.New("scheduler has no address")
	}
	return ai.Addrs[0].String() + "/p2p/" + ai.ID.String(), nil
}

func (c *cluster) startNode(cfg Config, name, dir, key, sched, originURL string, log *slog.Logger) error {
	dcfg := daemon.Default()
	dcfg.Dir = dir
	dcfg.Cache.Dir = filepath.Join(dir, "cache")
	dcfg.Cache.DirectIO = cfg.CacheDirect
	dcfg.Cache.HotBytes = int64(cfg.CacheHotMiB) << 20
	dcfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	dcfg.Host.ClusterKeyFile = key
	dcfg.Proxy.Listen = "127.0.0.1:0"
	sock := filepath.Join(dir, "proxy.sock")
	if cfg.ReaderSocket {
		dcfg.Proxy.UnixSocket = sock
	}
	dcfg.Upstream.DefaultRegistry = originURL
	dcfg.Exchange.UploadBytesPerSec = int64(bytesPerSec(cfg.NodeMbit))
	if sched != "" {
		dcfg.Scheduler.Schedulers = []string{sched}
		dcfg.Scheduler.HeartbeatInterval = 500 * time.Millisecond
	}
	// Without P2P eight or more nodes share the origin's link, so a
	// chunk may wait long for its turn there.
	dcfg.Node.FetchDeadline = 2 * time.Minute
	if cfg.HedgeDelay != 0 {
		dcfg.Node.HedgeDelay = max(cfg.HedgeDelay, 0)
	}
	dcfg.Labels = map[string]string{"host": name}
	d, err := daemon.New(dcfg, log.With("daemon", name))
	if err != nil {
		return err
	}
	c.nodes = append(c.nodes, d)
	if cfg.ReaderSocket {
		c.urls = append(c.urls, chunkapi.SchemeUnix+"://"+sock)
	} else {
		c.urls = append(c.urls, d.ProxyURL())
	}
	c.run(d.Run)
	return nil
}

// waitJoined polls the scheduler until n peers are members.
func (c *cluster) waitJoined(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := c.sched.State().Stats().Peers
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes joined the scheduler: %w", got, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop stops everything started, in reverse order, once.
func (c *cluster) stop() error {
	var errs []error
	for i := len(c.stops) - 1; i >= 0; i-- {
		errs = append(errs, c.stops[i]())
	}
	c.stops = nil
	return errors.Join(errs...)
}
