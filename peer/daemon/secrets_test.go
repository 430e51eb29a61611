package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
)

// The credentials of TestSecretsStayOutOfLogsAndMetrics: a client's
// password, the node's (in its docker config file) and the bearer token
// the registry's token server hands out for either.
const (
	clientPassword = "client-pass-secret"
	nodePassword   = "node-pass-secret"
	registryToken  = "registry-token-secret"
)

// syncBuffer is a log destination the daemon writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// authRegistry is an in-process registry behind bearer tokens: its token
// server (/token) gives registryToken to any Basic credentials, and the
// first failFirst blob GETs fail with 503, so the peer logs retries.
func authRegistry(t *testing.T, blob []byte, failFirst int32) *httptest.Server {
	t.Helper()
	reg := registry.New(registry.Logger(nilLogger()))
	var open atomic.Bool
	open.Store(true) // while the blob is pushed
	var fails atomic.Int32
	fails.Store(failFirst)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			if !strings.HasPrefix(r.Header.Get("Authorization"), "Basic ") {
				http.Error(w, "credentials required", http.StatusUnauthorized)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"token": registryToken, "expires_in": 300})
			return
		}
		if !open.Load() && r.URL.Path != "/v2/" {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && fails.Add(-1) >= 0 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			if r.Header.Get("Authorization") != "Bearer "+registryToken {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="test"`, srv.URL))
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/test/image", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(repo, static.NewLayer(blob, types.MediaType(rafs.MediaTypeBlob))); err != nil {
		t.Fatal(err)
	}
	open.Store(false)
	return srv
}

// A peer pulling through a registry that wants bearer tokens, with the
// node's credentials from its docker config file and a client's
// forwarded, with failures on the way (retries, logged): neither
// password, nor their base64 forms, nor the token appear in its log (at
// debug level) or its /metrics. Found clean; this keeps it so.
func TestSecretsStayOutOfLogsAndMetrics(t *testing.T) {
	t.Parallel()
	img, blob := buildBlob(t)
	srv := authRegistry(t, blob, 3)
	host := strings.TrimPrefix(srv.URL, "http://")
	nodeAuth := base64.StdEncoding.EncodeToString([]byte("node:" + nodePassword))
	clientAuth := base64.StdEncoding.EncodeToString([]byte("carol:" + clientPassword))
	dockerConfig := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(dockerConfig, []byte(`{"auths": {"`+host+`": {"auth": "`+nodeAuth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t, clusterKey(t), "")
	cfg.Upstream.DockerConfigFile = dockerConfig
	cfg.Upstream.LendNodeCredentials = []string{host}
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon Run: %v", err)
		}
	})

	rctx, rcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer rcancel()
	// With the node's credentials: the client sends none.
	if err := readThrough(rctx, d, srv.URL, img); err != nil {
		t.Fatal(err)
	}
	// A client's own, through the mirror's pass-through: the manifest is
	// not there, which is an answer like any other.
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, d.ProxyURL()+"/v2/test/image/manifests/latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(chunkapi.HeaderRegistry, srv.URL)
	req.Header.Set("Authorization", "Basic "+clientAuth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	mresp, err := http.Get(d.ProxyURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()

	if !strings.Contains(logs.String(), "retrying") {
		t.Errorf("the log shows no retry, so the failures did not happen:\n%s", logs.String())
	}
	channels := map[string]string{"log": logs.String(), "/metrics": string(metrics), "answer to the client": string(answer)}
	for ch, out := range channels {
		for _, s := range []string{clientPassword, nodePassword, nodeAuth, clientAuth, registryToken} {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the secret %q:\n%s", ch, s, out)
			}
		}
	}
}
