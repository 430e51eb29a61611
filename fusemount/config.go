package fusemount

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"damselfly/configs/field"
	"damselfly/fusemount/backend"
	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// Config is the mount daemon's configuration, in nydusd's shape: a
// backend (registry with a proxy and fallback, or a local OCI layout), a
// cache, prefetch, and FUSE tuning. The YAML keys are the mapstructure
// tags; configs/mount.yaml documents each. Fields tagged
// config:"advanced", here and in backend.Config and cache.Config, are
// tunables whose defaults need no touching, read from the file's
// advanced: section (advanced.amplify_io, advanced.backend.deadline, ...).
type Config struct {
	Backend backend.Config `mapstructure:"backend"`
	// Cache is the node cache shared with the node's peer daemon (the
	// same keys as its cache section); an empty Dir disables the disk
	// cache. DirectIO is off by default: the mount daemon reads the cache
	// on the path of a FUSE read, where a chunk the page cache still
	// holds answers sooner. Give the peer daemon's cache.group: a mount
	// daemon running as another user in that group reads the cache and
	// leaves writing it to the peer daemon.
	Cache    cache.Config   `mapstructure:"cache"`
	Prefetch PrefetchConfig `mapstructure:"prefetch"`
	// FileCopies keeps decoded copies of whole files for FUSE
	// passthrough (passthrough.go).
	FileCopies FileCopiesConfig `mapstructure:"file_copies"`
	// KernelImage serves a mount with the kernel's EROFS, from a decoded
	// image of the whole tree, once every chunk is on the node
	// (kernelimage.go).
	KernelImage KernelImageConfig `mapstructure:"kernel_image"`
	// MemoryBytes bounds decoded chunks kept in memory.
	MemoryBytes int64 `mapstructure:"memory_bytes"`
	// APISocket is the control socket; empty means the default derived
	// from the mountpoint (see SocketPath).
	APISocket string `mapstructure:"api_socket"`
	// AllowOther lets users other than the mounting one read the mount
	// (the default when mounting as root).
	AllowOther *bool `mapstructure:"allow_other"`
	// AmplifyIO is the most bytes one backend request fetches (merging
	// adjacent missing chunks).
	AmplifyIO int `mapstructure:"amplify_io" config:"advanced"`
	// ReadaheadChunks past a sequential read are fetched in the background.
	ReadaheadChunks int `mapstructure:"readahead_chunks" config:"advanced"`
	// EntryTimeout is how long the kernel may cache entries and attributes;
	// the tree is immutable, so long is right.
	EntryTimeout time.Duration `mapstructure:"entry_timeout" config:"advanced"`
	// MaxBootstrapBytes is the largest bootstrap the image's bootstrap
	// layer may inflate to; a layer whose superblock declares more is
	// refused before it is inflated (rafs.DefaultMaxBootstrapSize, sized
	// for a few million files, by default).
	MaxBootstrapBytes int64 `mapstructure:"max_bootstrap_bytes" config:"advanced"`
}

// DefaultCacheDir is the node cache the peer daemon uses by default too.
const DefaultCacheDir = "/var/lib/damselfly/cache"

// PrefetchConfig controls the background fetch after mounting.
type PrefetchConfig struct {
	Enable bool `mapstructure:"enable"`
	// All, after the prefetch table, fetches every remaining chunk.
	All bool `mapstructure:"prefetch_all"`
	// Threads is how many fetches the prefetch has in flight.
	Threads int `mapstructure:"threads" config:"advanced"`
	// BandwidthLimit in bytes per second; 0 = unlimited.
	BandwidthLimit int64 `mapstructure:"bandwidth_limit"`
}

// FileCopiesConfig controls the file copy store: the decoded content
// of files whose every chunk is on the node, which the kernel reads
// itself through FUSE passthrough, past the daemon. The node cache keeps
// its compressed chunks for peers as before; the copies are an extra,
// bounded by Capacity.
type FileCopiesConfig struct {
	Enable bool `mapstructure:"enable"`
	// Dir holds the copies; empty means DIR/files in the node cache
	// directory (no copies without one).
	Dir string `mapstructure:"dir"`
	// Capacity bounds the copies' bytes; the least recently opened go
	// first.
	Capacity int64 `mapstructure:"capacity"`
}

// KernelImageConfig controls kernel images: when the node holds every
// chunk of an image, a mount of it is an EROFS mount of the image's whole
// tree, decoded into one file, that the kernel serves with no daemon on
// the path of a read, a lookup or an open. A mount of an image not yet
// whole on the node is served through FUSE as always, and its kernel
// image is written once its last chunk arrives, for the next mount.
// Needs root (mount(2)) and a node cache.
type KernelImageConfig struct {
	Enable bool `mapstructure:"enable"`
	// Dir holds the images; empty means DIR/erofs in the node cache
	// directory.
	Dir string `mapstructure:"dir"`
	// Capacity bounds the images' bytes (each about its image's unpacked
	// size); the least recently mounted go first.
	Capacity int64 `mapstructure:"capacity"`
	// Lazy serves a mount of an image not yet whole on the node as the
	// kernel's EROFS too, over a loop device whose backing file is the
	// EROFS image served by this daemon (lazykernel.go).
	Lazy bool `mapstructure:"lazy"`
}

// KernelImagesDirName is where kernel images live in the node cache
// directory by default.
const KernelImagesDirName = "erofs"

// kernelImagesDir returns where kernel images live, "" for nowhere.
func (c Config) kernelImagesDir() string {
	switch {
	case !c.KernelImage.Enable:
		return ""
	case c.KernelImage.Dir != "":
		return c.KernelImage.Dir
	case c.Cache.Dir != "":
		return filepath.Join(c.Cache.Dir, KernelImagesDirName)
	}
	return ""
}

// FilesDirName is where file copies live in the node cache directory
// by default.
const FilesDirName = "files"

// fileCopiesDir returns where the copies live, "" for nowhere.
func (c Config) fileCopiesDir() string {
	switch {
	case !c.FileCopies.Enable:
		return ""
	case c.FileCopies.Dir != "":
		return c.FileCopies.Dir
	case c.Cache.Dir != "":
		return filepath.Join(c.Cache.Dir, FilesDirName)
	}
	return ""
}

// DefaultConfig returns the defaults every field falls back to.
func DefaultConfig() Config {
	return Config{
		Backend:         backend.Default(),
		Cache:           cache.Default(DefaultCacheDir),
		Prefetch:        PrefetchConfig{Enable: true, Threads: 2},
		FileCopies:      FileCopiesConfig{Capacity: 4 << 30},
		KernelImage:     KernelImageConfig{Capacity: 16 << 30},
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
	if c.Cache.Dir != "" {
		errs = append(errs, field.In("cache", c.Cache.Validate()))
	}
	if c.Prefetch.Threads < 1 || c.Prefetch.Threads > 64 {
		add("prefetch.threads", "%d outside 1..64", c.Prefetch.Threads)
	}
	if c.Prefetch.BandwidthLimit < 0 {
		add("prefetch.bandwidth_limit", "negative")
	}
	if c.FileCopies.Enable && c.FileCopies.Capacity < 1<<20 {
		add("file_copies.capacity", "%d is below 1 MiB", c.FileCopies.Capacity)
	}
	if c.KernelImage.Enable && c.KernelImage.Capacity < 1<<20 {
		add("kernel_image.capacity", "%d is below 1 MiB", c.KernelImage.Capacity)
	}
	if c.MaxBootstrapBytes < 1<<20 || c.MaxBootstrapBytes > rafs.MaxBootstrapSize {
		add("max_bootstrap_bytes", "%d outside 1 MiB..4 GiB", c.MaxBootstrapBytes)
	}
	return errors.Join(errs...)
}
