package fusemount

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The secrets of TestSecretsStayOut: backend.auth is base64 of
// "alice:" + secretPassword (a constant, so that the test also builds
// against the configuration types of before backend.Secret), and the
// proxy URL carries secretProxyPassword.
const (
	secretPassword      = "hunter2-auth-secret"
	secretAuth          = "YWxpY2U6aHVudGVyMi1hdXRoLXNlY3JldA=="
	secretProxyPassword = "proxy-pass-secret"
)

// A mount configured with registry credentials (backend.auth) and a
// proxy URL with a password in it shows neither in its status (the
// control API that `damselfly status` prints), its /metrics or its log,
// at debug level, after reading every file with the proxy down (so the
// proxy's URL is logged as unhealthy and reads go to the registry with
// the credentials).
func TestSecretsStayOut(t *testing.T) {
	layout, _ := corpusLayout(t)
	_, ref := pushToRegistry(t, layout, "sizes-rafs")
	cfg := testConfig(t)
	cfg.Prefetch.Enable = false
	cfg.Backend.Auth = secretAuth
	cfg.Backend.Proxy.URL = "http://bob:" + secretProxyPassword + "@127.0.0.1:1" // refused
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mp, _, _ := mountT(t, Options{Image: ref, Config: cfg, Logger: log})
	err := filepath.WalkDir(mp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			_, err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", SocketPath(mp))
	}}}
	get := func(path string) string {
		resp, err := c.Get("http://daemon" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return string(body)
	}
	st, err := QueryStatus(context.Background(), mp, "")
	if err != nil {
		t.Fatal(err)
	}
	text, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	channels := map[string]string{
		"status API":      get("/api/v1/daemon"),
		"status, decoded": string(text),
		"/metrics":        get("/metrics"),
		"log":             logs.String(),
	}
	for name, out := range channels {
		for _, s := range []string{secretPassword, secretAuth, secretProxyPassword} {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the secret %q:\n%s", name, s, out)
			}
		}
	}
	if !strings.Contains(logs.String(), "backend proxy unhealthy") {
		t.Errorf("the log does not report the proxy down, so its URL was not put to the test:\n%s", logs.String())
	}
	if st.Config.Backend.Proxy.URL == "" || !strings.Contains(channels["status API"], "127.0.0.1:1") {
		t.Errorf("status: got proxy URL %q, want it shown without its password", st.Config.Backend.Proxy.URL)
	}
}
