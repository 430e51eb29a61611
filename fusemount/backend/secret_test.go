package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The secrets of these tests: a password in backend.auth and one in a
// proxy URL's userinfo. None may show in anything printed or logged.
const (
	authPassword  = "hunter2-auth-secret"
	proxyPassword = "proxy-pass-secret"
)

// wantNoSecret fails if out holds a secret of these tests, or auth's
// base64 form.
func wantNoSecret(t *testing.T, what, out string, auth Secret) {
	t.Helper()
	for _, s := range []string{authPassword, proxyPassword, auth.Reveal()} {
		if s != "" && strings.Contains(out, s) {
			t.Errorf("%s shows the secret %q:\n%s", what, s, out)
		}
	}
}

// Every way a Config is printed, marshalled or logged shows Auth as
// REDACTED.
func TestSecretChannels(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.Host, cfg.Repo = "registry.example.com", "team/app"
	cfg.Auth = b64("alice:" + authPassword)
	channels := map[string]func() (string, error){
		"%v":  func() (string, error) { return fmt.Sprintf("%v", cfg), nil },
		"%+v": func() (string, error) { return fmt.Sprintf("%+v", cfg), nil },
		"%#v": func() (string, error) { return fmt.Sprintf("%#v", cfg), nil },
		"%s":  func() (string, error) { return fmt.Sprintf("%s", cfg.Auth), nil },
		"json": func() (string, error) {
			b, err := json.Marshal(cfg)
			return string(b), err
		},
		"yaml": func() (string, error) {
			b, err := yaml.Marshal(cfg)
			return string(b), err
		},
		"slog text": func() (string, error) {
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "cfg", cfg, "auth", cfg.Auth)
			return buf.String(), nil
		},
		"slog json": func() (string, error) {
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "cfg", cfg, "auth", cfg.Auth)
			return buf.String(), nil
		},
	}
	for name, f := range channels {
		out, err := f()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantNoSecret(t, name, out, cfg.Auth)
		if !strings.Contains(out, Redacted) {
			t.Errorf("%s: got %s, want %s in place of the secret", name, out, Redacted)
		}
	}
	if Secret("").String() != "" {
		t.Errorf("an empty Secret prints %q, want \"\" (so that unset shows as unset)", Secret(""))
	}
	if got := RedactURL("http://bob:" + proxyPassword + "@127.0.0.1:7950"); got != "http://bob:xxxxx@127.0.0.1:7950" {
		t.Errorf("RedactURL: got %q", got)
	}
}

// Validate's message about a bad proxy URL names the URL without its
// password: it ends up on a terminal or in a log.
func TestValidateHidesURLPassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"ftp://bob:" + proxyPassword + "@127.0.0.1:7950",
		"http://bob:" + proxyPassword + "@127.0.0.1:7950/?q=1",
		"http://bob:" + proxyPassword + "@127.0.0.1:7950/%zz",
	} {
		cfg := Default()
		cfg.Host, cfg.Repo = "registry.example.com", "team/app"
		cfg.Proxy.URL = u
		cfg.Proxy.PingURL = u
		err := cfg.Validate()
		if err == nil {
			t.Fatalf("proxy.url %s: got no error", u)
		}
		wantNoSecret(t, "Validate", err.Error(), "")
	}
}

// The proxy's health changes are logged with its URL, without the
// password.
func TestProxyLogHidesURLPassword(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newProxy(ProxyConfig{URL: "http://bob:" + proxyPassword + "@127.0.0.1:7950"}, http.DefaultTransport, log)
	p.setHealthy(false, errors.New("connection refused"))
	p.setHealthy(true, nil)
	if !strings.Contains(buf.String(), "127.0.0.1:7950") {
		t.Fatalf("the log does not name the proxy:\n%s", buf.String())
	}
	wantNoSecret(t, "log", buf.String(), "")
}
