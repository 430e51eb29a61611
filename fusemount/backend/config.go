package backend

import (
	"damselfly/rafs/chunkapi"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// Backend types.
const (
	TypeRegistry = "registry"
	TypeOCI      = "oci"
)

// Defaults of Config (Default).
const (
	DefaultTimeout        = 30 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultRetryLimit     = 3
	DefaultDeadline       = 3 * time.Minute
	DefaultCheckInterval  = 5 * time.Second
)

// Config configures a Backend, in the shape of nydusd's backend section.
// Start from Default: a zero duration is refused by Validate (Scheme and
// the proxy's PingURL, left empty, are derived from Host and URL); fields
// that belong to the other Type are ignored. The mapstructure tags are the
// configuration file's keys; fields tagged config:"advanced" are tunables
// whose defaults need no touching (advanced.backend.* in the mount's
// file).
type Config struct {
	// Type is "registry" (the default) or "oci".
	Type string `mapstructure:"type"`

	// Scheme is "https" or "http". Empty means http for loopback hosts
	// (127.0.0.0/8, ::1, localhost) and https otherwise.
	Scheme string `mapstructure:"scheme"`
	// Host is the registry's host[:port].
	Host string `mapstructure:"host"`
	// Repo is the repository, e.g. "library/app".
	Repo string `mapstructure:"repo"`
	// Auth is base64("user:password"), as in nydusd. Empty means the
	// credentials of the docker config file (go-containerregistry's
	// authn.DefaultKeychain, or WithKeychain), else anonymous. It prints
	// and marshals as REDACTED (Secret).
	Auth Secret `mapstructure:"auth"`
	// Timeout bounds one request, including its whole body.
	Timeout time.Duration `mapstructure:"timeout" config:"advanced"`
	// ConnectTimeout bounds one TCP connect.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout" config:"advanced"`
	// RetryLimit is how many transient failures in a row one read takes
	// from a source before it moves on: from the proxy to the registry
	// (the proxy is marked unhealthy), or from the registry back to the
	// proxy for one attempt even if it is marked unhealthy. Without a
	// proxy it has no effect: Deadline alone bounds retries.
	RetryLimit int `mapstructure:"retry_limit" config:"advanced"`
	// Deadline is how long one read keeps retrying transient failures,
	// with exponential backoff, before it returns the error. It bounds
	// the whole read: an attempt still in flight when it passes is
	// stopped. The default outlasts a registry restart.
	Deadline time.Duration `mapstructure:"deadline" config:"advanced"`
	// Proxy is the local peer's registry mirror; its URL empty means none.
	Proxy ProxyConfig `mapstructure:"proxy"`

	// Dir is the OCI image layout directory (blobs under blobs/sha256/).
	Dir string `mapstructure:"dir"`
}

// ProxyConfig is the local peer's registry-mirror endpoint.
type ProxyConfig struct {
	// URL is the local peer's base URL, e.g. http://127.0.0.1:7950, or
	// its unix socket, unix:///run/damselfly/peer.sock (the peer's
	// proxy.unix_socket), whose file mode limits who may use the peer.
	// Chunk runs go to its batch endpoint, URL + "/api/v1/chunks" (see
	// proxy/PROTOCOL.md), and byte ranges to its registry mirror, URL +
	// "/v2/<repo>/blobs/<digest>". A plain registry mirror without the
	// batch endpoint is read by byte ranges.
	URL string `mapstructure:"url"`
	// PingURL is the health endpoint; empty means URL + "/healthz". With
	// a unix socket URL it is a path on the socket, default /healthz. The
	// proxy is healthy while it answers 200.
	PingURL string `mapstructure:"ping_url" config:"advanced"`
	// Fallback sends requests straight to the registry while the proxy is
	// unhealthy; without it they keep retrying the proxy until Deadline.
	Fallback bool `mapstructure:"fallback"`
	// CheckInterval is the health probe period.
	CheckInterval time.Duration `mapstructure:"check_interval" config:"advanced"`
}

// Default returns the defaults, for a registry backend with a proxy
// fallback; Host and Repo (or Type and Dir) remain to be set.
func Default() Config {
	return Config{
		Type:           TypeRegistry,
		Timeout:        DefaultTimeout,
		ConnectTimeout: DefaultConnectTimeout,
		RetryLimit:     DefaultRetryLimit,
		Deadline:       DefaultDeadline,
		Proxy:          ProxyConfig{Fallback: true, CheckInterval: DefaultCheckInterval},
	}
}

// OCI returns Default for the OCI image layout in dir.
func OCI(dir string) Config {
	c := Default()
	c.Type, c.Dir = TypeOCI, dir
	return c
}

// resolve derives the fields left empty to be implied: Type (a
// registry), Scheme (from Host) and the proxy's PingURL (from its URL).
func (c Config) resolve() Config {
	if c.Type == "" {
		c.Type = TypeRegistry
	}
	if c.Scheme == "" {
		c.Scheme = "https"
		if isLoopback(c.Host) {
			c.Scheme = "http"
		}
	}
	if c.Proxy.URL != "" && c.Proxy.PingURL == "" {
		if strings.HasPrefix(c.Proxy.URL, chunkapi.SchemeUnix+":") {
			c.Proxy.PingURL = "/healthz" // a path on the socket
		} else {
			c.Proxy.PingURL = strings.TrimRight(c.Proxy.URL, "/") + "/healthz"
		}
	}
	return c
}

// Validate reports every problem with c at once, each naming its field
// (e.g. "backend.proxy.check_interval: must be > 0"). It does not touch
// the network or the disk.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("backend.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	positive := func(field string, d time.Duration, def time.Duration) {
		if d <= 0 {
			add(field, "must be > 0 (default %s), got %s", def, d)
		}
	}
	positive("deadline", c.Deadline, DefaultDeadline)
	if c.Type != TypeOCI { // what only a registry uses
		positive("timeout", c.Timeout, DefaultTimeout)
		positive("connect_timeout", c.ConnectTimeout, DefaultConnectTimeout)
		positive("proxy.check_interval", c.Proxy.CheckInterval, DefaultCheckInterval)
		if c.RetryLimit <= 0 {
			add("retry_limit", "must be > 0 (default %d), got %d", DefaultRetryLimit, c.RetryLimit)
		}
	}

	switch c.Type {
	case "", TypeRegistry:
		c.validateRegistry(add)
	case TypeOCI:
		if c.Dir == "" {
			add("dir", "required for type %q", TypeOCI)
		}
	default:
		add("type", "must be %q or %q, got %q", TypeRegistry, TypeOCI, c.Type)
	}
	return errors.Join(errs...)
}

func (c Config) validateRegistry(add func(field, format string, a ...any)) {
	switch c.Scheme {
	case "", "http", "https":
	default:
		add("scheme", `must be "https" or "http", got %q`, c.Scheme)
	}
	if c.Host == "" {
		add("host", "required for type %q", TypeRegistry)
	} else if _, err := name.NewRegistry(c.Host, name.StrictValidation); err != nil {
		add("host", "%q is not a registry host[:port]", c.Host)
	}
	if c.Repo == "" {
		add("repo", "required for type %q", TypeRegistry)
	} else if _, err := name.NewRepository("example.com/"+c.Repo, name.StrictValidation); err != nil {
		add("repo", "%q is not a repository name: %v", c.Repo, err)
	}
	if c.Auth != "" {
		if _, _, err := decodeAuth(c.Auth.Reveal()); err != nil {
			add("auth", "%v", err)
		}
	}
	_, unix, unixErr := chunkapi.SocketPath(c.Proxy.URL)
	switch {
	case unixErr != nil:
		add("proxy.url", "%v", unixErr)
	case c.Proxy.URL != "" && !unix:
		if err := checkHTTPURL(c.Proxy.URL); err != nil {
			add("proxy.url", "%v", err)
		}
	}
	switch {
	case c.Proxy.PingURL == "":
	case c.Proxy.URL == "":
		add("proxy.ping_url", "set without proxy.url")
	case unix:
		if !strings.HasPrefix(c.Proxy.PingURL, "/") || strings.HasPrefix(c.Proxy.PingURL, "//") {
			add("proxy.ping_url", "%q: with a unix socket proxy.url, want a path on the socket such as /healthz", c.Proxy.PingURL)
		}
	default:
		if err := checkHTTPURL(c.Proxy.PingURL); err != nil {
			add("proxy.ping_url", "%v", err)
		}
	}
}

// decodeAuth splits nydusd's base64("user:password").
func decodeAuth(s string) (user, password string, err error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", "", errors.New("not base64 (want base64 of \"user:password\")")
	}
	user, password, ok := strings.Cut(string(raw), ":")
	if !ok || user == "" {
		return "", "", errors.New("does not decode to \"user:password\"")
	}
	return user, password, nil
}

// checkHTTPURL checks a proxy URL. Its messages show the URL without its
// password: the error ends up on a terminal or in a log.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want http:// or https:// and a host", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: must not have a query or fragment", u.Redacted())
	}
	return nil
}

// isLoopback reports whether host[:port] names 127.0.0.0/8, ::1 or
// localhost, where plain HTTP is implied.
func isLoopback(hostport string) bool {
	h := hostport
	if sh, _, err := net.SplitHostPort(hostport); err == nil {
		h = sh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
