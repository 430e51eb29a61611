package daemon

import (
	"errors"
	"maps"
	"path/filepath"

	"damselfly/configs/field"
	"damselfly/peer"
	"damselfly/peer/exchange"
	dhost "damselfly/peer/host"
	"damselfly/peer/preheat"
	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/cache"
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
// of configs/peer.yaml: each section is the typed Config of the part it
// configures. Fields tagged config:"advanced", here and in those
// Configs, are tunables whose defaults need no touching, read from the
// file's advanced: section (advanced.node.hedge_delay, ...). Paths left
// empty are derived from Dir.
type Config struct {
	// Dir is the state directory: identity.key, cluster.key and holdings/
	// unless configured elsewhere. Created (0700) if missing.
	Dir string `mapstructure:"dir"`
	// Labels locate this peer for the scheduler (host, rack, zone, ...),
	// sent on registration.
	Labels map[string]string `mapstructure:"labels"`
	// Host is the libp2p host; its identity_file and cluster_key_file
	// default to Dir/identity.key and Dir/cluster.key when empty.
	Host dhost.Config `mapstructure:"host"`
	// Cache is the node cache, shared with the mount daemons. An empty
	// dir (the default) is DefaultCacheDir when Dir is DefaultDir, and
	// Dir/cache otherwise, so that peers with their own state dirs never
	// share a cache by accident.
	Cache cache.Config `mapstructure:"cache"`
	// Proxy is the HTTP endpoint; its grant_key_file defaults to
	// Dir/grant.key when empty.
	Proxy proxy.Config `mapstructure:"proxy"`
	// Upstream is the registry client (the file's registry section).
	Upstream registry.Config `mapstructure:"registry"`
	// Scheduler lists the scheduler daemons. With none, the peer works
	// alone: node cache, then origin.
	Scheduler client.Config `mapstructure:"scheduler"`
	// Exchange tunes serving chunks to other peers.
	Exchange exchange.ServerConfig `mapstructure:"exchange" config:"advanced"`
	// Node tunes fetching; its holdings_dir defaults to Dir/holdings, and
	// its route_timeout bounds the scheduler client's Route too.
	Node peer.NodeConfig `mapstructure:"node" config:"advanced"`
	// MaxBootstrapBytes is the largest bootstrap a preheated image's
	// bootstrap layer may inflate to (preheat.Config.MaxBootstrapSize).
	MaxBootstrapBytes int64 `mapstructure:"max_bootstrap_bytes" config:"advanced"`
}

// DefaultHotBytes is the node cache's hot_bytes by default: in the
// 16-node distribution benchmark it served nine in ten of a node's
// uploads, the chunks it had cached in the last second or two.
const DefaultHotBytes = 32 << 20

// Default returns the default configuration: state in DefaultDir, the
// cache in DefaultCacheDir (see Config.Cache), libp2p on dhost.DefaultListenAddr, the proxy
// on 127.0.0.1:7950, no scheduler, and every tunable at its default.
func Default() Config {
	h := dhost.Default("")
	h.IdentityFile, h.ClusterKeyFile = "", "" // in Dir
	c := cache.Default("")                    // see Config.Cache
	c.HotBytes = DefaultHotBytes
	x := exchange.DefaultServerConfig()
	// The node cache checks a CRC on every read and the requester
	// verifies every chunk; the sender's own hash of each chunk only
	// caught entries forged with a consistent CRC, for which the
	// requester's report and the ban are the right outcome. It cost a
	// third of the cluster's hashing.
	x.NoVerify = true
	return Config{
		Dir:       DefaultDir,
		Host:      h,
		Cache:     c,
		Exchange:  x,
		Node:      peer.DefaultNode(),
		Proxy:     proxy.Default(),
		Upstream:  registry.Default(),
		Scheduler: client.Default(),

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
	h := c.Host
	h.IdentityFile = inDir(h.IdentityFile, c.Dir, "identity.key")
	if !h.InsecureOpenCluster {
		h.ClusterKeyFile = inDir(h.ClusterKeyFile, c.Dir, "cluster.key")
	}
	return h
}

// CacheDir is where the node cache lives (see Config.Cache).
func (c Config) CacheDir() string {
	if c.Cache.Dir == "" && filepath.Clean(c.Dir) == DefaultDir {
		return DefaultCacheDir
	}
	return inDir(c.Cache.Dir, c.Dir, "cache")
}

func (c Config) cache() cache.Config {
	cc := c.Cache
	cc.Dir = c.CacheDir()
	return cc
}

func (c Config) node() peer.NodeConfig {
	n := c.Node
	n.HoldingsDir = inDir(n.HoldingsDir, c.Dir, "holdings")
	return n
}

// scheduler returns the scheduler client's configuration with the labels
// and the node's route timeout (and the upload limit as the capacity,
// unless one is given), and whether there is a scheduler at all.
func (c Config) scheduler() (client.Config, bool) {
	s := c.Scheduler
	if s.UploadCapacity == 0 {
		s.UploadCapacity = c.Exchange.UploadBytesPerSec
	}
	s.Labels = maps.Clone(c.Labels)
	s.RouteTimeout = c.Node.RouteTimeout
	return s, len(s.Schedulers) > 0
}

// Validate reports every problem with c at once, each naming its
// section and field.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: empty"))
	}
	errs = append(errs,
		field.In("host", c.host().Validate()),
		field.In("cache", c.cache().Validate()),
		field.In("exchange", c.Exchange.Validate()),
		field.In("node", c.node().Validate()),
		field.In("proxy", c.Proxy.Validate()),
		field.In("registry", c.Upstream.Validate()))
	if s, ok := c.scheduler(); ok {
		errs = append(errs, field.In("scheduler", s.Validate()))
	}
	if err := preheat.ValidMaxBootstrapSize(c.MaxBootstrapBytes); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
