package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"damselfly/peer"
	"damselfly/peer/exchange"
	"damselfly/peer/fetch"
	dhost "damselfly/peer/host"
	"damselfly/peer/manifestshare"
	"damselfly/peer/plain"
	"damselfly/peer/preheat"
	"damselfly/proxy"
	"damselfly/rafs/cache"
	"damselfly/rafs/manifests"
	"damselfly/rafs/registry"
	"damselfly/scheduler"
	"damselfly/scheduler/client"
)

// The node is what the proxy serves chunks from, its plain source what
// it serves plain blobs from.
var (
	_ proxy.EarlyChunkSource = (*peer.Node)(nil)
	_ proxy.BlobSource       = (*plain.Source)(nil)
)

// The scheduler client is the node's Router; neither package imports the
// other (their shared types are rafs/route).
var (
	_ fetch.Router      = (*client.Client)(nil)
	_ fetch.RouteWaiter = (*client.Client)(nil)
)

// setupTimeout bounds starting the libp2p host.
const setupTimeout = 30 * time.Second

// Daemon is a running peer daemon. New builds and binds it; Run serves.
type Daemon struct {
	log   *slog.Logger
	reg   *prometheus.Registry
	host  *dhost.Host
	cache *cache.Cache
	exch  *exchange.Server
	sched *client.Client // nil without schedulers
	up    *registry.Client
	node  *peer.Node
	heat  *client.PreheatServer
	proxy *proxy.Server

	started  time.Time
	cacheDir string

	closers []func() error // in the order of making; called in reverse
	served  bool           // Run served the proxy
}

// New validates cfg, creates the state directory and builds every part of
// the daemon, in dependency order: host, cache, exchange server,
// scheduler client, upstream client, node, proxy. When New returns, the
// host and the proxy are listening (AddrInfo and ProxyURL are known); Run
// serves. On error everything built so far is closed. log may be nil.
func New(cfg Config, log *slog.Logger) (_ *Daemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("peer config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := dhost.PrepareStateDir(cfg.Dir, log); err != nil {
		return nil, err
	}
	d := &Daemon{log: log, reg: prometheus.NewRegistry(), started: time.Now(), cacheDir: cfg.CacheDir()}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer func() {
		if err != nil {
			_ = d.close()
		}
	}()

	hcfg := cfg.host()
	hcfg.Registerer = d.reg
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if d.host, err = dhost.New(ctx, hcfg, log.With("part", "host")); err != nil {
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	d.onClose(d.host.Close)

	ccfg := cfg.cache()
	ccfg.Logger = log.With("part", "cache")
	if d.cache, err = cache.Open(ccfg); err != nil {
		return nil, fmt.Errorf("node cache: %w", err)
	}
	d.onClose(d.cache.Close)

	if d.exch, err = exchange.NewServer(d.host, d.cache, cfg.Exchange, log.With("part", "exchange")); err != nil {
		return nil, fmt.Errorf("chunk exchange: %w", err)
	}
	d.onClose(d.exch.Close)
	d.reg.MustRegister(newExchangeCollector(d.exch))

	var router fetch.Router
	if scfg, ok := cfg.scheduler(); ok {
		if d.sched, err = client.New(d.host, scfg, log.With("part", "scheduler-client")); err != nil {
			return nil, fmt.Errorf("scheduler client: %w", err)
		}
		exch := d.exch
		d.sched.SetLoad(func() scheduler.Load {
			return scheduler.Load{ActiveUploads: exch.Stats().Active}
		})
		router = d.sched
	} else {
		log.Warn("no scheduler configured: chunks come from the node cache and the origin only")
	}

	if d.up, err = registry.New(cfg.Upstream, log.With("part", "registry")); err != nil {
		return nil, fmt.Errorf("registry client: %w", err)
	}
	d.onClose(func() error { d.up.Close(); return nil })

	ncfg := cfg.node()
	ncfg.Registerer = d.reg
	if d.node, err = peer.NewNode(ncfg, d.host, d.cache, router, d.up, log.With("part", "node")); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	d.onClose(d.node.Close)
	d.exch.SetMissHook(d.node.Missed)
	d.exch.SetPartOfHook(d.node.PartOf)
	d.onClose(func() error { d.exch.SetMissHook(nil); d.exch.SetPartOfHook(nil); return nil })
	work, err := preheat.New(d.node, cfg.preheat(), log.With("part", "preheat"))
	if err != nil {
		return nil, fmt.Errorf("preheat: %w", err)
	}
	if d.heat, err = client.NewPreheatServer(d.host, cfg.preheatStreams(), work, log.With("part", "preheat")); err != nil {
		return nil, fmt.Errorf("preheat: %w", err)
	}
	d.onClose(d.heat.Close)

	pcfg := cfg.Proxy
	if pcfg.GrantKeyFile == "" {
		pcfg.GrantKeyFile = filepath.Join(cfg.Dir, "grant.key")
	}
	mstore, err := manifests.Open(filepath.Join(cfg.Dir, "manifests"), manifests.Options{Log: log.With("part", "manifests")})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	// Other peers answer for the manifests this node lacks, and this one
	// for theirs, while the origin cannot be reached.
	var shareRouter manifestshare.Router
	if d.sched != nil {
		shareRouter = d.sched
	}
	share := manifestshare.New(d.host, mstore, shareRouter, manifestshare.Config{}, log.With("part", "manifests"))
	d.onClose(share.Close)
	if d.proxy, err = proxy.New(pcfg, d.node, d.up, d.reg, log.With("part", "proxy"),
		proxy.WithBlobs(d.node.Plain()), proxy.WithManifests(mstore), proxy.WithManifestPeers(share),
		proxy.WithStatus(func() any { return d.Status() })); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	share.SetPublic(d.proxy.PublicAt)
	if err = d.proxy.Listen(); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	// Serve closes the proxy's listeners when it returns; a daemon that
	// never runs closes them by serving with a cancelled context.
	d.onClose(func() error {
		if d.served {
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return d.proxy.Serve(ctx)
	})
	return d, nil
}

func (d *Daemon) onClose(f func() error) { d.closers = append(d.closers, f) }

// Close closes a daemon that was made but not run. Run closes everything
// itself.
func (d *Daemon) Close() error { return d.close() }

// close closes every part built, in reverse order, once.
func (d *Daemon) close() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		errs = append(errs, d.closers[i]())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// ProxyURL is the proxy's base URL, "http://127.0.0.1:PORT".
func (d *Daemon) ProxyURL() string { return d.proxy.URL() }

// AddrInfo is the peer's ID and libp2p addresses.
func (d *Daemon) AddrInfo() lpeer.AddrInfo { return d.host.AddrInfo() }

// Node is the daemon's chunk source (for tests and the demo).
func (d *Daemon) Node() *peer.Node { return d.node }

// CacheStats returns the node cache's counters.
func (d *Daemon) CacheStats() cache.Stats { return d.cache.Stats() }

// Preheater serves the schedulers' preheat requests (for tests).
func (d *Daemon) Preheater() *client.PreheatServer { return d.heat }

// preheatStreams is who may ask for preheats: the schedulers this peer
// is configured with.
func (c Config) preheatStreams() client.PreheatConfig {
	p := client.DefaultPreheat()
	p.Schedulers = c.Scheduler.Schedulers
	return p
}

// preheat is how preheats read images: through the upstream's
// registries and credentials.
func (c Config) preheat() preheat.Config {
	p := preheat.Default()
	p.PlainHTTP = c.Upstream.PlainHTTP
	p.DockerConfigFile = c.Upstream.DockerConfigFile
	p.MaxBootstrapSize = c.MaxBootstrapBytes
	return p
}

// Run serves until ctx is done or a part fails: the proxy, the node's
// holdings upkeep and the scheduler client run in one errgroup. Then the
// parts are closed in the reverse order of their making. Run may be called
// once; it returns nil after a shutdown asked for by ctx.
func (d *Daemon) Run(ctx context.Context) error {
	d.served = true
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := d.proxy.Serve(gctx); err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := d.node.Run(gctx); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		return nil
	})
	if d.sched != nil {
		g.Go(func() error {
			if err := d.sched.Run(gctx); err != nil {
				return fmt.Errorf("scheduler client: %w", err)
			}
			return nil
		})
	}
	// Parts return nil when gctx ends; one that fails ends the others.
	runErr := g.Wait()
	return errors.Join(runErr, d.close())
}
