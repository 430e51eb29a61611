package backend

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Default()
	ok.Host, ok.Repo = "registry.example.com:5000", "library/app"
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{"minimal registry", ok, nil},
		{"defaults plus host", func() Config { c := Default(); c.Host, c.Repo = "127.0.0.1:5000", "a/b"; return c }(), nil},
		{"oci", OCI("/layout"), nil},
		{"oci ignores registry fields", func() Config { c := OCI("/x"); c.Proxy = ProxyConfig{Fallback: true}; return c }(), nil},
		{"proxy", func() Config { c := ok; c.Proxy.URL, c.Proxy.Fallback = "http://127.0.0.1:65001", true; return c }(), nil},
		{"unknown type", func() Config { c := Default(); c.Type = "s3"; return c }(), []string{`backend.type: must be "registry" or "oci", got "s3"`}},
		{"registry without host or repo", Default(), []string{"backend.host: required", "backend.repo: required"}},
		{"oci without dir", OCI(""), []string{"backend.dir: required"}},
		{"bad scheme", func() Config { c := ok; c.Scheme = "ftp"; return c }(), []string{"backend.scheme:"}},
		{"bad host", func() Config { c := ok; c.Host = "http://x"; return c }(), []string{"backend.host:"}},
		{"bad repo", func() Config { c := ok; c.Repo = "Library/App"; return c }(), []string{"backend.repo:"}},
		{"auth not base64", func() Config { c := ok; c.Auth = "user:pass"; return c }(), []string{"backend.auth: not base64"}},
		{"auth without colon", func() Config { c := ok; c.Auth = b64("user"); return c }(), []string{"backend.auth: does not decode"}},
		{"everything negative at once", func() Config {
			c := ok
			c.Timeout, c.ConnectTimeout, c.Deadline, c.RetryLimit = -1, -1, -time.Second, -2
			c.Proxy = ProxyConfig{URL: "http://127.0.0.1:1", CheckInterval: -time.Second}
			return c
		}(), []string{
			"backend.timeout: must be > 0",
			"backend.connect_timeout: must be > 0",
			"backend.deadline: must be > 0",
			"backend.retry_limit: must be > 0",
			"backend.proxy.check_interval: must be > 0",
		}},
		{"bad proxy urls", func() Config {
			c := ok
			c.Proxy.URL, c.Proxy.PingURL = "127.0.0.1:65001", "http://x/healthz?y=1"
			return c
		}(), []string{"backend.proxy.url:", "backend.proxy.ping_url:"}},
		{"bad unix socket urls", func() Config {
			c := ok
			c.Proxy.URL = "unix:relative.sock"
			return c
		}(), []string{"backend.proxy.url:"}},
		{"ping url with a socket not a path", func() Config {
			c := ok
			c.Proxy.URL, c.Proxy.PingURL = "unix:///run/peer.sock", "http://127.0.0.1:7950/healthz"
			return c
		}(), []string{"backend.proxy.ping_url:"}},
		{"ping url alone", func() Config { c := ok; c.Proxy.PingURL = "http://x/healthz"; return c }(), []string{"backend.proxy.ping_url: set without proxy.url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to contain %q", err, w)
				}
			}
			if got, want := strings.Count(err.Error(), "\n")+1, len(tt.want); got != want {
				t.Errorf("got %d problems (%q), want %d", got, err, want)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Host: "h", Proxy: ProxyConfig{CheckInterval: -1}})
	if err == nil || !strings.Contains(err.Error(), "backend.repo") || !strings.Contains(err.Error(), "backend.proxy.check_interval") {
		t.Fatalf("got %v, want errors naming backend.repo and backend.proxy.check_interval", err)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, scheme, wantScheme string
	}{
		{"registry.example.com", "", "https"},
		{"registry.example.com:5000", "http", "http"},
		{"127.0.0.1:5000", "", "http"},
		{"127.1.2.3", "", "http"},
		{"localhost:5000", "", "http"},
		{"LOCALHOST", "", "http"},
		{"[::1]:5000", "", "http"},
		{"10.0.0.1:5000", "", "https"},
		{"127.0.0.1:5000", "https", "https"},
	}
	for _, tt := range tests {
		c := Config{Host: tt.host, Scheme: tt.scheme}.resolve()
		if c.Scheme != tt.wantScheme {
			t.Errorf("host %q scheme %q: got %q, want %q", tt.host, tt.scheme, c.Scheme, tt.wantScheme)
		}
	}
	want := Default()
	c := want
	c.Proxy.URL = "http://127.0.0.1:65001/"
	c = c.resolve()
	if c.Type != want.Type || c.Timeout != want.Timeout || c.ConnectTimeout != want.ConnectTimeout ||
		c.RetryLimit != want.RetryLimit || c.Deadline != want.Deadline || c.Proxy.CheckInterval != want.Proxy.CheckInterval {
		t.Errorf("got %+v, want the defaults kept: %+v", c, want)
	}
	if got, want := c.Proxy.PingURL, "http://127.0.0.1:65001/healthz"; got != want {
		t.Errorf("ping url: got %q, want %q", got, want)
	}
}
