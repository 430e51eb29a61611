package snapshotter

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"damselfly/fusemount/backend"
	"damselfly/rafs"
)

// Config is the snapshotter's configuration; configs/snapshotter.yaml
// documents every key. Fields tagged config:"advanced" are read from
// the file's advanced: section.
type Config struct {
	// Root holds the metadata (containerd's bolt store), one directory
	// per snapshot, and one directory per mount daemon (mounts/<id>: its
	// mountpoint, status socket, daemon.json and log).
	Root string `mapstructure:"root"`
	// Address is the unix socket containerd's proxy_plugins entry names.
	Address string `mapstructure:"address"`
	// Insecure talks plain HTTP to every registry (loopback registries
	// always are), for manifests and bootstraps here and for everything
	// the mount daemons fetch (they get --insecure).
	Insecure bool        `mapstructure:"insecure"`
	Mount    MountConfig `mapstructure:"mount"`
	CRI      CRIConfig   `mapstructure:"cri"`
	// MountTimeout bounds a mount daemon's start, bootstrap fetch included.
	MountTimeout time.Duration `mapstructure:"mount_timeout" config:"advanced"`
	// CheckInterval is how often the mount daemons in use are checked;
	// one that died is replaced at the same mountpoint.
	CheckInterval time.Duration `mapstructure:"check_interval" config:"advanced"`
	// StopTimeout bounds a mount daemon's exit after SIGTERM before it is
	// killed and its mountpoint detached.
	StopTimeout time.Duration `mapstructure:"stop_timeout" config:"advanced"`
	// MaxBootstrapBytes is the largest bootstrap the snapshotter fetches
	// to check an image at pull time (as mount's max_bootstrap_bytes).
	MaxBootstrapBytes int64 `mapstructure:"max_bootstrap_bytes" config:"advanced"`
}

// MountConfig says how the mount daemons are run.
type MountConfig struct {
	// Config is a mount daemon configuration file (configs/mount.yaml)
	// given to every daemon; empty means the mount daemon's defaults (the
	// node cache in /var/lib/damselfly/cache, the peer on 127.0.0.1:7950).
	Config string `mapstructure:"config"`
	// Peer, if set, is the node's peer endpoint, given to every daemon as
	// its backend.proxy.url over whatever the mount config says.
	Peer string `mapstructure:"peer"`
	// StartOnPull starts an image's mount daemon as soon as its pull has
	// checked the bootstrap, and keeps it this long for a first
	// container (which then finds the mount ready, and the image's
	// prefetch under way); 0 starts it with the first container. A
	// daemon a container has used lives while snapshots use it.
	StartOnPull time.Duration `mapstructure:"start_on_pull"`
	// Binary is the damselfly executable run as `damselfly mount`; empty
	// means the snapshotter's own.
	Binary string `mapstructure:"binary" config:"advanced"`
}

// CRIConfig is the CRI ImageService the snapshotter serves to learn
// the credentials the kubelet pulls with (package cricreds).
type CRIConfig struct {
	// Listen is the unix socket of the ImageService, for the kubelet's
	// --image-service-endpoint; empty serves none (the node's docker
	// config is then the only source of credentials).
	Listen string `mapstructure:"listen"`
	// ImageService is containerd's CRI socket, where every call is
	// forwarded.
	ImageService string `mapstructure:"image_service"`
}

// Defaults of Config.
const (
	DefaultRoot    = "/var/lib/damselfly/snapshotter"
	DefaultAddress = "/run/damselfly/snapshotter.sock"
	// DefaultCRIImageService is containerd's default socket.
	DefaultCRIImageService = "/run/containerd/containerd.sock"
)

// Default returns the defaults every field falls back to.
func Default() Config {
	return Config{
		Root:              DefaultRoot,
		Address:           DefaultAddress,
		CRI:               CRIConfig{ImageService: DefaultCRIImageService},
		Mount:             MountConfig{StartOnPull: 2 * time.Minute},
		MountTimeout:      60 * time.Second,
		CheckInterval:     5 * time.Second,
		StopTimeout:       10 * time.Second,
		MaxBootstrapBytes: rafs.DefaultMaxBootstrapSize,
	}
}

// Redacted returns c as it may be shown (--print-config): mount.peer
// without the password it may carry.
func (c Config) Redacted() Config {
	if c.Mount.Peer != "" {
		c.Mount.Peer = backend.RedactURL(c.Mount.Peer)
	}
	return c
}

// maxSocketPath is the longest path a unix socket may have (sun_path).
const maxSocketPath = 107

// Validate reports every problem at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if !filepath.IsAbs(c.Root) {
		add("root", "%q is not an absolute path", c.Root)
	} else if n := len(daemonSocket(c.Root, "0123456789abcdef")); n > maxSocketPath {
		add("root", "%q is too long: the mount daemons' sockets under it would be %d bytes, over %d", c.Root, n, maxSocketPath)
	}
	if !filepath.IsAbs(c.Address) {
		add("address", "%q is not an absolute path", c.Address)
	} else if len(c.Address) > maxSocketPath {
		add("address", "%q is longer than a unix socket path may be (%d bytes)", c.Address, maxSocketPath)
	}
	if c.CRI.Listen != "" {
		for _, f := range []struct{ field, path string }{{"cri.listen", c.CRI.Listen}, {"cri.image_service", c.CRI.ImageService}} {
			if !filepath.IsAbs(f.path) {
				add(f.field, "%q is not an absolute path", f.path)
			} else if len(f.path) > maxSocketPath {
				add(f.field, "%q is longer than a unix socket path may be (%d bytes)", f.path, maxSocketPath)
			}
		}
		if c.CRI.Listen == c.Address || c.CRI.Listen == c.CRI.ImageService {
			add("cri.listen", "%q is also the snapshotter's or containerd's socket", c.CRI.Listen)
		}
	}
	if c.Mount.Config != "" && !filepath.IsAbs(c.Mount.Config) {
		add("mount.config", "%q is not an absolute path", c.Mount.Config)
	}
	if c.Mount.Peer != "" {
		u, err := url.Parse(c.Mount.Peer)
		switch {
		case err != nil:
			add("mount.peer", "%v", err)
		case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix":
			add("mount.peer", "%q: want an http://, https:// or unix:// URL", c.Mount.Peer)
		}
	}
	if c.Mount.StartOnPull < 0 {
		add("mount.start_on_pull", "%v is negative", c.Mount.StartOnPull)
	}
	if c.Mount.Binary != "" && !filepath.IsAbs(c.Mount.Binary) {
		add("mount.binary", "%q is not an absolute path", c.Mount.Binary)
	}
	if c.MountTimeout <= 0 {
		add("mount_timeout", "%v is not positive", c.MountTimeout)
	}
	if c.CheckInterval <= 0 {
		add("check_interval", "%v is not positive", c.CheckInterval)
	}
	if c.StopTimeout <= 0 {
		add("stop_timeout", "%v is not positive", c.StopTimeout)
	}
	if c.MaxBootstrapBytes < 1<<20 || c.MaxBootstrapBytes > rafs.MaxBootstrapSize {
		add("max_bootstrap_bytes", "%d outside 1 MiB..4 GiB", c.MaxBootstrapBytes)
	}
	return errors.Join(errs...)
}
