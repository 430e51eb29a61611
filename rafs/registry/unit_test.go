package registry

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // substring of the error, "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"zero", func(c *Config) { *c = Config{} }, "timeout"},
		{"zero timeouts", func(c *Config) { *c = Config{DefaultRegistry: "https://reg.example"} }, "connect_timeout"},
		{"loopback http", func(c *Config) { c.DefaultRegistry = "http://127.0.0.1:5000" }, ""},
		{"plain host", func(c *Config) { c.DefaultRegistry = "http://reg:5000"; c.PlainHTTP = []string{"reg:5000"} }, ""},
		{"remote http", func(c *Config) { c.DefaultRegistry = "http://reg:5000" }, "default_registry"},
		{"path", func(c *Config) { c.DefaultRegistry = "https://reg/v2" }, "default_registry"},
		{"ftp", func(c *Config) { c.DefaultRegistry = "ftp://reg" }, "default_registry"},
		{"bad plain", func(c *Config) { c.PlainHTTP = []string{"a/b"} }, "plain_http"},
		{"negative", func(c *Config) { c.Timeout = -time.Second; c.RetryLimit = -1 }, "retry_limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestParseChallenge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		scheme string
		params map[string]string
		bad    bool
	}{
		{in: `Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/debian:pull"`,
			scheme: "bearer", params: map[string]string{"realm": "https://auth.docker.io/token", "service": "registry.docker.io", "scope": "repository:library/debian:pull"}},
		{in: `Basic realm="Registry Realm"`, scheme: "basic", params: map[string]string{"realm": "Registry Realm"}},
		{in: `Bearer realm=tok, service = "a\"b"`, scheme: "bearer", params: map[string]string{"realm": "tok", "service": `a"b`}},
		{in: `Bearer`, scheme: "bearer", params: map[string]string{}},
		{in: ``, bad: true},
		{in: `Bearer realm="open`, bad: true},
		{in: `Bearer =x`, bad: true},
		{in: `Bearer realm="a" service="b"`, bad: true},
	} {
		c, err := parseChallenge(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseChallenge(%q): got %+v, want error", tc.in, c)
			}
			continue
		}
		if err != nil || c.scheme != tc.scheme || len(c.params) != len(tc.params) {
			t.Errorf("parseChallenge(%q): got %+v, %v, want %s %v", tc.in, c, err, tc.scheme, tc.params)
			continue
		}
		for k, v := range tc.params {
			if c.params[k] != v {
				t.Errorf("parseChallenge(%q)[%s]: got %q, want %q", tc.in, k, c.params[k], v)
			}
		}
	}
}

func FuzzParseChallenge(f *testing.F) {
	f.Add(`Bearer realm="https://auth.docker.io/token",service="registry.docker.io"`)
	f.Add(`Basic realm="x"`)
	f.Add(`Bearer realm="a\`)
	f.Add(`Bearer a=b,,c=d`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseChallenge(s)
		if err == nil && c.scheme == "" {
			t.Errorf("parseChallenge(%q): no scheme and no error", s)
		}
	})
}

func TestCredsFor(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString([]byte("u:p"))
	cfg := `{"auths":{"https://index.docker.io/v1/":{"auth":"` + b64 + `"},"reg.example:5000":{"username":"x","password":"y"},"bad.example":{"auth":"!!"}}}`
	for _, tc := range []struct {
		host, want string
		bad        bool
	}{
		{host: "registry-1.docker.io", want: "Basic " + b64},
		{host: "reg.example:5000", want: basicAuth("x", "y")},
		{host: "other.example", want: ""},
		{host: "bad.example", bad: true},
	} {
		got, err := credsFor([]byte(cfg), tc.host)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("credsFor(%s): got %q, %v; want %q, error %v", tc.host, got, err, tc.want, tc.bad)
		}
	}
}

func FuzzCredsFor(f *testing.F) {
	f.Add([]byte(`{"auths":{"h":{"auth":"dTpw"}}}`), "h")
	f.Add([]byte(`{"auths":{"https://index.docker.io/v1/":{"username":"a","password":"b"}}}`), "docker.io")
	f.Add([]byte(`[`), "h")
	f.Fuzz(func(t *testing.T, data []byte, host string) {
		got, err := credsFor(data, host)
		if err == nil && got != "" && !strings.HasPrefix(got, "Basic ") {
			t.Errorf("credsFor: got %q, want Basic credentials", got)
		}
	})
}

func TestNames(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"library/debian": true, "a": true, "a/b/c": true, "a.b_c__d--e": true, "my-org/app-1": true,
		"": false, "A": false, "a//b": false, "/a": false, "a/": false, "-a": false, "a-": false,
		"a..b": false, "a___b": false, "a/../b": false, "a b": false, strings.Repeat("a", 256): false,
	} {
		if got := ValidRepo(s); got != want {
			t.Errorf("ValidRepo(%q): got %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"latest": true, "v1.2-rc_3": true, "_x": true, ".x": false, "-x": false, "": false, "a:b": false, strings.Repeat("t", 129): false} {
		if got := ValidTag(s); got != want {
			t.Errorf("ValidTag(%q): got %v, want %v", s, got, want)
		}
	}
	hex := strings.Repeat("ab", 32)
	for s, want := range map[string]bool{"sha256:" + hex: true, "sha512:" + hex + hex: true, "sha256:" + hex[1:]: false, "sha256:" + strings.ToUpper(hex): false, "md5:" + hex: false, hex: false} {
		if got := ValidDigest(s); got != want {
			t.Errorf("ValidDigest(%q): got %v, want %v", s, got, want)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	f.Add("bytes 0-9/10")
	f.Add("bytes 5-9/*")
	f.Add("bytes 9-5/10")
	f.Fuzz(func(t *testing.T, s string) {
		start, end, total, err := ParseContentRange(s)
		if err == nil && (start < 0 || end < start || (total >= 0 && total <= end)) {
			t.Errorf("ParseContentRange(%q) = %d, %d, %d: inconsistent", s, start, end, total)
		}
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for n := 1; n < 40; n++ {
		if d := backoff(n, 0); d < backoffBase/2 || d > backoffMax {
			t.Errorf("backoff(%d) = %v, want within [%v, %v]", n, d, backoffBase/2, backoffMax)
		}
	}
	if d := backoff(1, time.Hour); d != maxRetryAfter {
		t.Errorf("backoff with Retry-After 1h: got %v, want %v", d, maxRetryAfter)
	}
}

func TestParseContentRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in                string
		start, end, total int64
		ok                bool
	}{
		{"bytes 0-9/10", 0, 9, 10, true},
		{"bytes 5-5/*", 5, 5, -1, true},
		{"bytes 5-4/10", 0, 0, 0, false},
		{"bytes 0-9/9", 0, 0, 0, false},
		{"bytes -1-9/10", 0, 0, 0, false},
		{"bytes 0-9", 0, 0, 0, false},
		{"items 0-9/10", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	}
	for _, tt := range tests {
		s, e, n, err := ParseContentRange(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (s != tt.start || e != tt.end || n != tt.total)) {
			t.Errorf("%q: got %d %d %d %v, want %d %d %d ok=%v", tt.in, s, e, n, err, tt.start, tt.end, tt.total, tt.ok)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.in, got, tt.want)
		}
	}
}
