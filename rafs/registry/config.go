package registry

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Defaults of Config (Default).
const (
	DefaultTimeout        = 30 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultRetryLimit     = 3
)

// Config configures a Client. Start from Default: a zero field means
// zero, and Validate refuses it where that makes no sense. The
// mapstructure tags are the configuration file's keys; fields tagged
// config:"advanced" are tunables whose defaults need no touching
// (advanced.registry.* in the peer's file).
type Config struct {
	// DefaultRegistry is the base URL of the registry used when a request
	// names none, "https://host[:port]". Empty (the default) means none:
	// such a request is refused (ErrNoRegistry), so that nothing reaches a
	// registry the operator did not name.
	DefaultRegistry string `mapstructure:"default_registry"`
	// PlainHTTP lists registry hosts ("host[:port]") spoken to over plain
	// HTTP. Loopback hosts (127.0.0.0/8, ::1, localhost) may be named with
	// an http:// base URL without being listed; any other http:// base
	// URL is refused, so credentials never cross the network in clear by
	// accident.
	PlainHTTP []string `mapstructure:"plain_http"`
	// DockerConfigFile is a docker config.json whose "auths" hold the
	// node's own credentials. Empty means none. It is read again when its
	// size or modification time changes, so updates apply without a
	// restart. The node's credentials are used for a client's request only
	// where LendNodeCredentials says so.
	DockerConfigFile string `mapstructure:"docker_config_file"`
	// LendNodeCredentials lists the registry hosts ("host[:port]") for
	// which a request that carries no Authorization is sent with the
	// node's own credentials from DockerConfigFile. Anyone who can reach
	// the proxy then reads whatever those credentials can: list only
	// registries whose every repository any local client may read. Other
	// registries see such a request as anonymous.
	LendNodeCredentials []string `mapstructure:"lend_node_credentials"`
	// Timeout bounds one ReadRange attempt, and the wait for response
	// headers of a forwarded request (its body may stream for longer).
	Timeout time.Duration `mapstructure:"timeout" config:"advanced"`
	// ConnectTimeout bounds one TCP connect.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout" config:"advanced"`
	// RetryLimit is how many times a transient failure is retried
	// (connection errors, 5xx, 429), with exponential backoff.
	RetryLimit int `mapstructure:"retry_limit" config:"advanced"`
}

// Default returns the default configuration.
func Default() Config {
	return Config{
		Timeout:        DefaultTimeout,
		ConnectTimeout: DefaultConnectTimeout,
		RetryLimit:     DefaultRetryLimit,
	}
}

// Validate reports every problem of c at once, each naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.DefaultRegistry != "" {
		if _, err := parseBase(c.DefaultRegistry, c.PlainHTTP); err != nil {
			errs = append(errs, fmt.Errorf("default_registry: %w", err))
		}
	}
	for _, h := range c.PlainHTTP {
		if h == "" || strings.ContainsAny(h, "/ ") {
			errs = append(errs, fmt.Errorf("plain_http: %q is not a host[:port]", h))
		}
	}
	for _, h := range c.LendNodeCredentials {
		if h == "" || strings.ContainsAny(h, "/ ") {
			errs = append(errs, fmt.Errorf("lend_node_credentials: %q is not a host[:port]", h))
		}
	}
	if len(c.LendNodeCredentials) > 0 && c.DockerConfigFile == "" {
		errs = append(errs, errors.New("lend_node_credentials: set, but docker_config_file is empty"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: %v is not positive", c.Timeout))
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("connect_timeout: %v is not positive", c.ConnectTimeout))
	}
	if c.RetryLimit < 0 || c.RetryLimit > 100 {
		errs = append(errs, fmt.Errorf("retry_limit: %d is outside 0..100", c.RetryLimit))
	}
	return errors.Join(errs...)
}

// parseBase checks a registry base URL: http or https, a host, nothing
// else; http only for loopback or PlainHTTP hosts. It returns the URL
// normalised to "scheme://host".
func parseBase(s string, plain []string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("registry %q: %w", s, err)
	}
	if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("registry %q: want scheme://host[:port]", s)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Host) && !contains(plain, u.Host) {
			return nil, fmt.Errorf("registry %q: plain http only to loopback or plain_http hosts", s)
		}
	default:
		return nil, fmt.Errorf("registry %q: scheme must be http or https", s)
	}
	return &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host)}, nil
}

// isLoopback reports whether hostport names a loopback host.
func isLoopback(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
