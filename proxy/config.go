package proxy

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Defaults of Config (Default).
const (
	DefaultListen            = "127.0.0.1:7950"
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultWriteStallTimeout = time.Minute
	DefaultAuthTTL           = time.Minute
	DefaultAuthStale         = 24 * time.Hour
	DefaultManifestStale     = 24 * time.Hour
)

// Config configures a Server. Start from Default: a zero field means
// zero, and Validate refuses it where that makes no sense. The
// mapstructure tags are the configuration file's keys; fields tagged
// config:"advanced" are tunables whose defaults need no touching
// (advanced.proxy.* in the peer's file).
type Config struct {
	// Listen is the TCP address, host:port (port 0 picks a free one).
	Listen string `mapstructure:"listen"`
	// AllowRemote permits a Listen address that is not loopback. The
	// endpoint forwards credentials and serves cached data, so it is
	// refused by default.
	AllowRemote bool `mapstructure:"allow_remote"`
	// LogRequests logs one line per mirror request at info level
	// (method, repository, digest or tag, status, bytes, what served it,
	// duration). The last 64 are in the peer's status either way.
	LogRequests bool `mapstructure:"log_requests"`
	// UnixSocket, if set, is a unix socket path served as well.
	UnixSocket string `mapstructure:"unix_socket"`
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration `mapstructure:"read_header_timeout" config:"advanced"`
	// ReadTimeout bounds reading a whole request, body included. It does
	// not bound streaming a response.
	ReadTimeout time.Duration `mapstructure:"read_timeout" config:"advanced"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration `mapstructure:"idle_timeout" config:"advanced"`
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int `mapstructure:"max_header_bytes" config:"advanced"`
	// WriteStallTimeout bounds each write of a response body: a client
	// that stops reading for this long is cut off, so it cannot hold a
	// fetch open. (A whole-response WriteTimeout would cut long streams.)
	WriteStallTimeout time.Duration `mapstructure:"write_stall_timeout" config:"advanced"`
	// ShutdownTimeout is how long Serve waits for requests in flight
	// after its context ends before closing their connections.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" config:"advanced"`
	// AuthTTL is how long the origin registry's verdict on a client
	// (may these credentials pull this blob of this repository?) is used
	// before the registry is asked again (authz.go). A refusal is kept at
	// most 5 s.
	AuthTTL time.Duration `mapstructure:"auth_ttl" config:"advanced"`
	// AuthStale is how long a client the registry allowed keeps being
	// allowed while the registry cannot be reached. Clients it never
	// allowed are refused during an outage.
	AuthStale time.Duration `mapstructure:"auth_stale" config:"advanced"`
	// ManifestStale bounds how old a tag's last resolution at the origin
	// may be for the mirror to answer the tag from the node's manifest
	// store while the origin cannot be reached (such answers carry
	// HeaderStale). While the origin answers, tags are always resolved
	// there; manifests by digest are served from the store through any
	// outage (they are verified, not stale).
	ManifestStale time.Duration `mapstructure:"manifest_stale"`
	// GrantKeyFile holds the key of the grants that let an allowed mount
	// daemon read through an outage for its whole life (authz.go): 32
	// random bytes, created 0600 on first start. Empty: a new key per
	// process, so grants do not survive a restart.
	GrantKeyFile string `mapstructure:"grant_key_file"`
}

// Default returns the default configuration.
func Default() Config {
	return Config{
		Listen:            DefaultListen,
		LogRequests:       true,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		WriteStallTimeout: DefaultWriteStallTimeout,
		ShutdownTimeout:   DefaultShutdownTimeout,
		AuthTTL:           DefaultAuthTTL,
		AuthStale:         DefaultAuthStale,
		ManifestStale:     DefaultManifestStale,
	}
}

// Validate reports every problem of c at once, each naming its key.
func (c Config) Validate() error {
	var errs []error
	host, _, err := net.SplitHostPort(c.Listen)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("listen: %q: %w", c.Listen, err))
	case !c.AllowRemote && !loopbackHost(host):
		errs = append(errs, fmt.Errorf("listen: %q is not a loopback address (set allow_remote to serve the network)", c.Listen))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout}, {"read_timeout", c.ReadTimeout},
		{"idle_timeout", c.IdleTimeout}, {"shutdown_timeout", c.ShutdownTimeout},
		{"write_stall_timeout", c.WriteStallTimeout}, {"auth_ttl", c.AuthTTL}, {"auth_stale", c.AuthStale},
		{"manifest_stale", c.ManifestStale},
	} {
		if f.d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %v is not positive", f.name, f.d))
		}
	}
	if c.MaxHeaderBytes < 1<<10 || c.MaxHeaderBytes > 16<<20 {
		errs = append(errs, fmt.Errorf("max_header_bytes: %d is outside 1 KiB..16 MiB", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// loopbackHost reports whether host (no port) is a loopback name or IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
