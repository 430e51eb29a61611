package fusemount

import (
	"errors"
	"fmt"
	"time"

	"damselfly/fusemount/backend"
	"damselfly/rafs"
)

// Config is the mount daemon's configuration, in nydusd's shape: a
// backend (registry with a proxy and fallback, or a local OCI layout), a
// cache, prefetch, and FUSE tuning. The YAML keys are the mapstructure
// tags; configs/mount.yaml documents each.
type Config struct {
	Backend  backend.Config `mapstructure:"backend"`
	Cache    CacheConfig    `mapstructure:"cache"`
	Prefetch PrefetchConfig `mapstructure:"prefetch"`
	// AmplifyIO is the most bytes one backend request fetches (merging
	// adjacent missing chunks).
	AmplifyIO int `mapstructure:"amplify_io"`
	// MemoryBytes bounds decoded chunks kept in memory.
	MemoryBytes int64 `mapstructure:"memory_bytes"`
	// ReadaheadChunks past a sequential read are fetched in the background.
	ReadaheadChunks int `mapstructure:"readahead_chunks"`
	// EntryTimeout is how long the kernel may cache entries and attributes;
	// the tree is immutable, so long is right.
	EntryTimeout time.Duration `mapstructure:"entry_timeout"`
	// APISocket is the control socket; empty means the default derived
	// from the mountpoint (see SocketPath).
	APISocket string `mapstructure:"api_socket"`
	// AllowOther lets users other than the mounting one read the mount
	// (the default when mounting as root).
	AllowOther *bool `mapstructure:"allow_other"`
	// MaxBootstrapBytes is the largest bootstrap the image's bootstrap
	// layer may inflate to; a layer whose superblock declares more is
	// refused before it is inflated (rafs.DefaultMaxBootstrapSize, sized
	// for a few million files, by default).
	MaxBootstrapBytes int64 `mapstructure:"max_bootstrap_bytes"`
}

// CacheConfig is the node cache shared with the node's peer daemon.
type CacheConfig struct {
	// Dir is the node cache directory; empty disables the disk cache.
	Dir           string  `mapstructure:"dir"`
	Capacity      int64   `mapstructure:"capacity"` // bytes; 0 = unlimited
	HighWatermark float64 `mapstructure:"high_watermark"`
	LowWatermark  float64 `mapstructure:"low_watermark"`
	// DirectIO reads and writes chunk files past the page cache (see
	// peer/cache.Config.DirectIO). Off by default: the mount daemon reads
	// the cache on the path of a FUSE read, where a chunk the page cache
	// still holds answers sooner.
	DirectIO bool `mapstructure:"direct_io"`
	// Group, a group name or gid, makes the cache's directories 0750 and
	// files 0640 owned by that group instead of 0700 and 0600 (see
	// peer/cache.Config.Group). Give the peer daemon's cache.group; a
	// mount daemon running as another user in that group reads the
	// cache and leaves writing it to the peer daemon.
	Group string `mapstructure:"group"`
}

// PrefetchConfig controls the background fetch after mounting.
type PrefetchConfig struct {
	Enable bool `mapstructure:"enable"`
	// All, after the prefetch table, fetches every remaining chunk.
	All     bool `mapstructure:"prefetch_all"`
	Threads int  `mapstructure:"threads"`
	// BandwidthLimit in bytes per second; 0 = unlimited.
	BandwidthLimit int64 `mapstructure:"bandwidth_limit"`
}

// DefaultConfig returns the defaults every field falls back to.
func DefaultConfig() Config {
	return Config{
		Backend: backend.Config{
			Type:           "registry",
			Timeout:        30 * time.Second,
			ConnectTimeout: 5 * time.Second,
			RetryLimit:     3,
			Deadline:       3 * time.Minute,
			Proxy:          backend.ProxyConfig{Fallback: true, CheckInterval: 5 * time.Second},
		},
		Cache:           CacheConfig{Dir: "/var/lib/damselfly/cache", HighWatermark: 0.95, LowWatermark: 0.8},
		Prefetch:        PrefetchConfig{Enable: true, Threads: 2},
		AmplifyIO:       1 << 20,
		MemoryBytes:     32 << 20,
		ReadaheadChunks: 4,
		EntryTimeout:    24 * time.Hour,

		MaxBootstrapBytes: rafs.DefaultMaxBootstrapSize,
	}
}

// Redacted returns c as it may be shown, by the status API and
// --print-config: backend.auth is REDACTED (it marshals so anyway, as a
// backend.Secret; here it is replaced too, so that nothing reading the
// copy can reveal it) and the proxy URLs lose their passwords.
func (c Config) Redacted() Config {
	b := &c.Backend
	if b.Auth != "" {
		b.Auth = backend.Redacted
	}
	if b.Proxy.URL != "" {
		b.Proxy.URL = backend.RedactURL(b.Proxy.URL)
	}
	if b.Proxy.PingURL != "" {
		b.Proxy.PingURL = backend.RedactURL(b.Proxy.PingURL)
	}
	return c
}

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if c.AmplifyIO < 4<<10 || c.AmplifyIO > 64<<20 {
		add("amplify_io", "%d outside 4 KiB..64 MiB", c.AmplifyIO)
	}
	if c.MemoryBytes < 1<<20 {
		add("memory_bytes", "%d is below 1 MiB", c.MemoryBytes)
	}
	if c.ReadaheadChunks < 0 || c.ReadaheadChunks > 64 {
		add("readahead_chunks", "%d outside 0..64", c.ReadaheadChunks)
	}
	if c.EntryTimeout < 0 {
		add("entry_timeout", "negative")
	}
	if c.Cache.Capacity < 0 {
		add("cache.capacity", "negative")
	}
	if c.Cache.Capacity > 0 && !(c.Cache.LowWatermark > 0 && c.Cache.LowWatermark < c.Cache.HighWatermark && c.Cache.HighWatermark <= 1) {
		add("cache", "want 0 < low_watermark (%v) < high_watermark (%v) <= 1", c.Cache.LowWatermark, c.Cache.HighWatermark)
	}
	if c.Prefetch.Threads < 1 || c.Prefetch.Threads > 64 {
		add("prefetch.threads", "%d outside 1..64", c.Prefetch.Threads)
	}
	if c.Prefetch.BandwidthLimit < 0 {
		add("prefetch.bandwidth_limit", "negative")
	}
	if c.MaxBootstrapBytes < 1<<20 || c.MaxBootstrapBytes > rafs.MaxBootstrapSize {
		add("max_bootstrap_bytes", "%d outside 1 MiB..4 GiB", c.MaxBootstrapBytes)
	}
	return errors.Join(errs...)
}
