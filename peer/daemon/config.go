package daemon

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"time"

	"damselfly/peer"
	"damselfly/peer/cache"
	"damselfly/peer/exchange"
	dhost "damselfly/peer/host"
	"damselfly/peer/preheat"
	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/registry"
	"damselfly/scheduler/client"
)

// Default locations.
const (
	// DefaultDir is the default state directory.
	DefaultDir = "/var/lib/damselfly/peer"
	// DefaultCacheDir is the node cache the mount daemons use by default
	// (configs/mount.yaml), so that a node keeps one copy of each chunk.
	DefaultCacheDir = "/var/lib/damselfly/cache"
)

// Config configures the peer daemon. Keys (mapstructure tags) are those
// of configs/peer.yaml. Paths left empty are derived from Dir.
type Config struct {
	// Dir is the state directory: identity.key, cluster.key and holdings/
	// unless configured elsewhere. Created (0700) if missing.
	Dir      string         `mapstructure:"dir"`
	Host     HostConfig     `mapstructure:"host"`
	Cache    CacheConfig    `mapstructure:"cache"`
	Exchange ExchangeConfig `mapstructure:"exchange"`
	// Node tunes fetching; its holdings_dir defaults to Dir/holdings.
	Node     peer.NodeConfig `mapstructure:"node"`
	Proxy    proxy.Config    `mapstructure:"proxy"`
	Upstream registry.Config `mapstructure:"upstream"`
	// Scheduler lists the scheduler daemons. With none, the peer works
	// alone: node cache, then origin.
	Scheduler client.Config `mapstructure:"scheduler"`
	// Labels locate this peer for the scheduler (host, rack, zone, ...);
	// scheduler.labels entries win over them.
	Labels map[string]string `mapstructure:"labels"`
	// MaxBootstrapBytes is the largest bootstrap a preheated image's
	// bootstrap layer may inflate to (preheat.Config.MaxBootstrapSize).
	MaxBootstrapBytes int64 `mapstructure:"max_bootstrap_bytes"`
}

// HostConfig is the libp2p host's part of Config (see peer/host.Config).
type HostConfig struct {
	// ListenAddrs are TCP multiaddrs to listen on.
	ListenAddrs []string `mapstructure:"listen_addrs"`
	// AnnounceAddrs replace the listen addresses in what other peers are
	// told (NAT, container port mappings).
	AnnounceAddrs []string `mapstructure:"announce_addrs"`
	// IdentityFile holds the peer's private key; default Dir/identity.key,
	// created on first start.
	IdentityFile string `mapstructure:"identity_file"`
	// ClusterKeyFile is the cluster's pre-shared key (make one with
	// `damselfly peer keygen FILE`); default Dir/cluster.key. Required
	// unless InsecureOpenCluster.
	ClusterKeyFile string `mapstructure:"cluster_key_file"`
	// InsecureOpenCluster lets any peer connect. For labs only.
	InsecureOpenCluster bool `mapstructure:"insecure_open_cluster"`
	// Security is "tls" (default) or "noise".
	Security string `mapstructure:"security"`
	// ClusterAuth is "proof" (default) or "pnet": how peers without the
	// cluster key are kept out (peer/host.Config.ClusterAuth).
	ClusterAuth     string        `mapstructure:"cluster_auth"`
	MaxConns        int           `mapstructure:"max_conns"`
	MaxConnsPerPeer int           `mapstructure:"max_conns_per_peer"`
	DialTimeout     time.Duration `mapstructure:"dial_timeout"`
	// ResourceMetrics exports libp2p's resource-manager gauges
	// (peer/host.Config.ResourceMetrics).
	ResourceMetrics bool `mapstructure:"resource_metrics"`
}

// CacheConfig is the node cache's part of Config (see peer/cache.Config).
type CacheConfig struct {
	// Dir is the node cache directory, shared with the mount daemons;
	// DefaultCacheDir by default, Dir/cache if set empty.
	Dir string `mapstructure:"dir"`
	// Capacity is the most bytes the cache holds; 0 means unlimited.
	Capacity      int64   `mapstructure:"capacity"`
	HighWatermark float64 `mapstructure:"high_watermark"`
	LowWatermark  float64 `mapstructure:"low_watermark"`
	// DirectIO reads and writes chunk files past the page cache (see
	// peer/cache.Config.DirectIO); off by default.
	DirectIO bool `mapstructure:"direct_io"`
	// HotBytes is memory for the chunks most recently cached, served to
	// peers and readers without the disk, with DirectIO only
	// (peer/cache.Config.HotBytes); DefaultHotBytes by default, 0 none.
	HotBytes int64 `mapstructure:"hot_bytes"`
	// Group, a group name or gid, lets that group read the cache: 0750
	// directories and 0640 files owned by it, instead of 0700 and 0600
	// (peer/cache.Config.Group). For mount daemons that run as another
	// user; give them the same cache.group.
	Group string `mapstructure:"group"`
}

// ExchangeConfig is the chunk exchange server's part of Config (see
// peer/exchange.ServerConfig). Zero values mean the defaults.
type ExchangeConfig struct {
	MaxStreamsPerPeer int           `mapstructure:"max_streams_per_peer"`
	MaxStreams        int           `mapstructure:"max_streams"`
	UploadBytesPerSec int64         `mapstructure:"upload_bytes_per_sec"`
	StreamTimeout     time.Duration `mapstructure:"stream_timeout"`
	NoVerify          bool          `mapstructure:"no_verify"`
}

// DefaultHotBytes is CacheConfig.HotBytes by default: in the 16-node
// distribution benchmark it served nine in ten of a node's uploads, the
// chunks it had cached in the last second or two.
const DefaultHotBytes = 32 << 20

// Default returns the default configuration: state in DefaultDir, the
// cache in DefaultCacheDir, libp2p on dhost.DefaultListenAddr, the proxy on 127.0.0.1:7950, no
// scheduler.
func Default() Config {
	return Config{
		Dir:       DefaultDir,
		Host:      HostConfig{ListenAddrs: []string{dhost.DefaultListenAddr}},
		Cache:     CacheConfig{Dir: DefaultCacheDir, HotBytes: DefaultHotBytes},
		Node:      peer.DefaultNode(),
		Proxy:     proxy.Default(),
		Upstream:  registry.Default(),
		Scheduler: client.Default(),
		// The node cache checks a CRC on every read and the requester
		// verifies every chunk; the sender's own hash of each chunk only
		// caught entries forged with a consistent CRC, for which the
		// requester's report and the ban are the right outcome. It cost
		// a third of the cluster's hashing.
		Exchange: ExchangeConfig{NoVerify: true},

		MaxBootstrapBytes: rafs.DefaultMaxBootstrapSize,
	}
}

// inDir returns p, or name in dir when p is empty.
func inDir(p, dir, name string) string {
	if p != "" {
		return p
	}
	return filepath.Join(dir, name)
}

// host returns the host configuration with paths resolved.
func (c Config) host() dhost.Config {
	h := dhost.Config{
		IdentityFile:        inDir(c.Host.IdentityFile, c.Dir, "identity.key"),
		ListenAddrs:         c.Host.ListenAddrs,
		AnnounceAddrs:       c.Host.AnnounceAddrs,
		ClusterKeyFile:      c.Host.ClusterKeyFile,
		InsecureOpenCluster: c.Host.InsecureOpenCluster,
		Security:            c.Host.Security,
		ClusterAuth:         c.Host.ClusterAuth,
		MaxConns:            c.Host.MaxConns,
		MaxConnsPerPeer:     c.Host.MaxConnsPerPeer,
		DialTimeout:         c.Host.DialTimeout,
		ResourceMetrics:     c.Host.ResourceMetrics,
	}
	if !h.InsecureOpenCluster {
		h.ClusterKeyFile = inDir(h.ClusterKeyFile, c.Dir, "cluster.key")
	}
	return h
}

func (c Config) cache() cache.Config {
	return cache.Config{
		Dir:           inDir(c.Cache.Dir, c.Dir, "cache"),
		Capacity:      c.Cache.Capacity,
		HighWatermark: c.Cache.HighWatermark,
		LowWatermark:  c.Cache.LowWatermark,
		DirectIO:      c.Cache.DirectIO,
		HotBytes:      c.Cache.HotBytes,
		Group:         c.Cache.Group,
	}
}

func (c Config) exchange() exchange.ServerConfig {
	return exchange.ServerConfig{
		MaxStreamsPerPeer: c.Exchange.MaxStreamsPerPeer,
		MaxStreams:        c.Exchange.MaxStreams,
		UploadBytesPerSec: c.Exchange.UploadBytesPerSec,
		StreamTimeout:     c.Exchange.StreamTimeout,
		NoVerify:          c.Exchange.NoVerify,
	}
}

func (c Config) node() peer.NodeConfig {
	n := c.Node
	n.HoldingsDir = inDir(n.HoldingsDir, c.Dir, "holdings")
	return n
}

// scheduler returns the scheduler client's configuration with Labels
// merged in (and the upload limit as the capacity, unless one is given),
// and whether there is a scheduler at all.
func (c Config) scheduler() (client.Config, bool) {
	s := c.Scheduler
	if s.UploadCapacity == 0 {
		s.UploadCapacity = c.Exchange.UploadBytesPerSec
	}
	if len(c.Labels) > 0 {
		labels := maps.Clone(c.Labels)
		maps.Copy(labels, s.Labels)
		s.Labels = labels
	}
	return s, len(s.Schedulers) > 0
}

// Validate reports every problem with c at once, each naming its
// section and field.
func (c Config) Validate() error {
	var errs []error
	add := func(section string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", section, err))
		}
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: empty"))
	}
	add("host", c.host().Validate())
	add("cache", c.cache().Validate())
	add("exchange", c.exchange().Validate())
	add("node", c.node().Validate())
	add("proxy", c.Proxy.Validate())
	add("upstream", c.Upstream.Validate())
	if s, ok := c.scheduler(); ok {
		add("scheduler", s.Validate())
	}
	if err := preheat.ValidMaxBootstrapSize(c.MaxBootstrapBytes); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
