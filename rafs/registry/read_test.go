package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, mod func(*registry.Config)) *registry.Client {
	t.Helper()
	cfg := registry.Default()
	cfg.Timeout = 10 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	c, err := registry.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestReadRange(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, nil)
	data := randBytes(1, 100<<10)
	d := reg.PushBlob(t, "lib/app", data)
	c := newClient(t, nil)
	ctx := testCtx(t)
	ref := registry.Ref{Registry: reg.URL, Repo: "lib/app"}
	for _, tc := range []struct{ off, n int }{{0, 1}, {0, len(data)}, {12345, 4096}, {len(data) - 10, 10}} {
		p := make([]byte, tc.n)
		if err := c.ReadRange(ctx, ref, d, int64(tc.off), p); err != nil {
			t.Fatalf("ReadRange(%d, %d): %v", tc.off, tc.n, err)
		}
		if !bytes.Equal(p, data[tc.off:tc.off+tc.n]) {
			t.Errorf("ReadRange(%d, %d): bytes differ", tc.off, tc.n)
		}
	}

	err := c.ReadRange(ctx, ref, d, int64(len(data)-5), make([]byte, 10))
	if !errors.Is(err, registry.ErrRange) || registry.IsTransient(err) {
		t.Errorf("range past the end: got %v, want permanent ErrRange", err)
	}

	var missing rafs.Digest
	missing[0] = 1
	err = c.ReadRange(ctx, ref, missing, 0, make([]byte, 10))
	var se *registry.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound || registry.IsTransient(err) {
		t.Errorf("missing blob: got %v, want permanent 404", err)
	}

	if err := c.ReadRange(ctx, registry.Ref{Registry: reg.URL, Repo: "Bad/../x"}, d, 0, make([]byte, 1)); err == nil {
		t.Error("bad repository name: got nil error")
	}
	if err := c.ReadRange(ctx, registry.Ref{Registry: "http://192.0.2.1:5000", Repo: "a"}, d, 0, make([]byte, 1)); err == nil {
		t.Error("plain http to a remote host: got nil error")
	}
}

func TestReadRangeRetriesTransient(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, nil)
	data := randBytes(2, 10<<10)
	d := reg.PushBlob(t, "app", data)
	var fail atomic.Int32
	reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/blobs/") && fail.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	ctx := testCtx(t)
	ref := registry.Ref{Registry: reg.URL, Repo: "app"}

	fail.Store(2)
	c := newClient(t, func(c *registry.Config) { c.RetryLimit = 3 })
	p := make([]byte, 100)
	if err := c.ReadRange(ctx, ref, d, 50, p); err != nil {
		t.Fatalf("two 503s then success, RetryLimit 3: %v", err)
	}
	if !bytes.Equal(p, data[50:150]) {
		t.Error("bytes differ after retries")
	}

	fail.Store(5)
	c = newClient(t, func(c *registry.Config) { c.RetryLimit = 1 })
	err := c.ReadRange(ctx, ref, d, 50, p)
	var se *registry.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable || !registry.IsTransient(err) {
		t.Errorf("503s beyond RetryLimit: got %v, want a transient 503", err)
	}
}

// ReadRangeFunc reports the bytes as they arrive, and a retry after a
// response cut short asks only for the bytes not yet reported.
func TestReadRangeFuncResumes(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, nil)
	data := randBytes(3, 256<<10)
	d := reg.PushBlob(t, "app", data)
	const off, n, cut = 1000, 200 << 10, 70 << 10
	var mu sync.Mutex
	var ranges []string
	var cuts atomic.Int32
	cuts.Store(1)
	reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/blobs/") {
			return false
		}
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		mu.Unlock()
		if cuts.Add(-1) < 0 {
			return false
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, len(data)))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(data[off : off+cut]) // and end: the body is cut short
		return true
	})
	c := newClient(t, func(c *registry.Config) { c.RetryLimit = 2 })
	p := make([]byte, n)
	var reported []int
	err := c.ReadRangeFunc(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "app"}, d, off, p, func(k int) {
		if len(reported) > 0 && k <= reported[len(reported)-1] {
			t.Errorf("progress went from %d to %d", reported[len(reported)-1], k)
		}
		if !bytes.Equal(p[:k], data[off:off+k]) {
			t.Errorf("progress %d: the bytes reported differ from the blob's", k)
		}
		reported = append(reported, k)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[off:off+n]) {
		t.Error("bytes differ after the resumed read")
	}
	if len(reported) == 0 || reported[len(reported)-1] != n {
		t.Errorf("last progress %v, want %d", reported, n)
	}
	want := []string{fmt.Sprintf("bytes=%d-%d", off, off+n-1), fmt.Sprintf("bytes=%d-%d", off+cut, off+n-1)}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ranges, want) {
		t.Errorf("requests asked for %q, want %q", ranges, want)
	}
}

func TestReadRangeFollowsRedirect(t *testing.T) {
	t.Parallel()
	data := randBytes(3, 20<<10)
	storage := registrytest.New(t, nil) // stands in for blob storage on another host
	d := storage.PushBlob(t, "store", data)
	var sawAuth atomic.Value
	storage.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		sawAuth.Store(r.Header.Get("Authorization"))
		return false
	})
	reg := registrytest.New(t, &registrytest.Auth{User: "u", Pass: "p"})
	reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/blobs/") && r.Header.Get("Authorization") == "Bearer "+registrytest.Token {
			http.Redirect(w, r, storage.URL+"/v2/store/blobs/"+d.String(), http.StatusTemporaryRedirect)
			return true
		}
		return false
	})
	c := newClient(t, nil)
	p := make([]byte, 1000)
	ref := registry.Ref{Registry: reg.URL, Repo: "app", Authorization: reg.BasicAuth()}
	if err := c.ReadRange(testCtx(t), ref, d, 777, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[777:1777]) {
		t.Error("bytes differ through a redirect")
	}
	if a, _ := sawAuth.Load().(string); a != "" {
		t.Errorf("storage saw Authorization %q, want none (other host)", a)
	}
}

func TestReadRangeBearerAuth(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, &registrytest.Auth{User: "alice", Pass: "s3cret"})
	data := randBytes(4, 5000)
	d := reg.PushBlob(t, "team/app", data)
	ctx := testCtx(t)
	c := newClient(t, nil)
	ref := registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: reg.BasicAuth()}
	before := reg.TokenFetches.Load()
	for i := range 3 {
		p := make([]byte, 100)
		if err := c.ReadRange(ctx, ref, d, int64(i*100), p); err != nil {
			t.Fatalf("read %d with client basic credentials: %v", i, err)
		}
		if !bytes.Equal(p, data[i*100:i*100+100]) {
			t.Fatalf("read %d: bytes differ", i)
		}
	}
	if got := reg.TokenFetches.Load() - before; got != 1 {
		t.Errorf("token fetches for 3 reads: got %d, want 1 (cached)", got)
	}

	// A client's bearer token is forwarded as it is.
	p := make([]byte, 10)
	if err := c.ReadRange(ctx, registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: "Bearer " + registrytest.Token}, d, 0, p); err != nil {
		t.Errorf("client bearer token: %v", err)
	}

	// Wrong or missing credentials: a permanent 401.
	for _, authz := range []string{"", "Basic " + "d3Jvbmc6d3Jvbmc=", "Bearer nope"} {
		err := c.ReadRange(ctx, registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: authz}, d, 0, p)
		var se *registry.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusUnauthorized || registry.IsTransient(err) {
			t.Errorf("Authorization %q: got %v, want a permanent 401", authz, err)
		}
	}
}

func TestReadRangeAnonymousToken(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, &registrytest.Auth{User: "u", Pass: "p", Anonymous: true})
	data := randBytes(5, 300)
	d := reg.PushBlob(t, "pub", data)
	c := newClient(t, nil)
	p := make([]byte, 300)
	if err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "pub"}, d, 0, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data) {
		t.Error("bytes differ")
	}
}

func TestReadRangeNodeCredentials(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, &registrytest.Auth{User: "node", Pass: "pw"})
	data := randBytes(6, 300)
	d := reg.PushBlob(t, "priv", data)
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	auth := strings.TrimPrefix(reg.BasicAuth(), "Basic ")
	if err := os.WriteFile(cfgFile, []byte(`{"auths":{"http://`+reg.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 300)
	c := newClient(t, func(c *registry.Config) { c.DockerConfigFile = cfgFile })
	if err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "priv"}, d, 0, p); err == nil {
		t.Error("node credentials not lent: got nil error, want 401")
	}
	c = newClient(t, func(c *registry.Config) { c.DockerConfigFile = cfgFile; c.LendNodeCredentials = []string{reg.Host} })
	if err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "priv"}, d, 0, p); err != nil {
		t.Fatalf("with node credentials lent: %v", err)
	}
	if !bytes.Equal(p, data) {
		t.Error("bytes differ")
	}
	c = newClient(t, func(c *registry.Config) {
		c.DockerConfigFile = filepath.Join(t.TempDir(), "missing.json")
		c.LendNodeCredentials = []string{reg.Host}
	})
	if err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "priv"}, d, 0, p); err == nil {
		t.Error("without node credentials: got nil error, want 401")
	}
}

// TestHTTPSToPlainServerIsPermanent: https to a registry that speaks
// plain HTTP fails at once with an error that says so, and is not
// retried (only configuration fixes it).
func TestHTTPSToPlainServerIsPermanent(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	var logs syncBuffer
	cfg := registry.Default()
	cfg.RetryLimit = 3
	c, err := registry.New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ref := registry.Ref{Registry: "https://" + strings.TrimPrefix(srv.URL, "http://"), Repo: "lib/app"}
	err = c.ReadRange(testCtx(t), ref, rafs.Digest{1}, 0, make([]byte, 10))
	if err == nil || registry.IsTransient(err) {
		t.Fatalf("ReadRange over https from a plain-HTTP server: %v (transient %v), want a permanent error", err, registry.IsTransient(err))
	}
	if !strings.Contains(err.Error(), "HTTP response to HTTPS client") {
		t.Errorf("error %q does not say the server speaks plain HTTP", err)
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("the read was retried:\n%s", logs.String())
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the plain-HTTP server answered %d requests, want none", n)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// TestLoopbackNamespaceIsPlainHTTP: a loopback host named by containerd's
// ?ns= is spoken to over plain HTTP without a plain_http entry; other
// hosts over https unless listed.
func TestLoopbackNamespaceIsPlainHTTP(t *testing.T) {
	t.Parallel()
	c := newClient(t, func(cfg *registry.Config) { cfg.PlainHTTP = []string{"reg.lan:5000"} })
	for host, want := range map[string]string{
		"127.0.0.1:5088":   "http://127.0.0.1:5088",
		"localhost:5000":   "http://localhost:5000",
		"[::1]:5000":       "http://[::1]:5000",
		"reg.lan:5000":     "http://reg.lan:5000",
		"reg.example:5000": "https://reg.example:5000",
		"docker.io":        "https://registry-1.docker.io",
	} {
		got, err := c.RegistryForHost(host)
		if err != nil || got != want {
			t.Errorf("RegistryForHost(%q) = %q, %v; want %q", host, got, err, want)
		}
	}
	if _, err := c.DefaultRegistry(); !errors.Is(err, registry.ErrNoRegistry) {
		t.Errorf("DefaultRegistry without default_registry: %v, want ErrNoRegistry", err)
	}
	err := c.ReadRange(testCtx(t), registry.Ref{Repo: "lib/app"}, rafs.Digest{1}, 0, make([]byte, 10))
	if !errors.Is(err, registry.ErrNoRegistry) || registry.IsTransient(err) {
		t.Errorf("ReadRange naming no registry: %v, want permanent ErrNoRegistry", err)
	}
}

// TestReachability: a registry that answers (even 404) is reachable; one
// that does not is failing, with why, until it answers again.
func TestReachability(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, nil)
	c := newClient(t, func(cfg *registry.Config) { cfg.RetryLimit = 0 })
	ref := registry.Ref{Registry: reg.URL, Repo: "lib/app"}
	if err := c.ReadRange(testCtx(t), ref, rafs.Digest{1}, 0, make([]byte, 10)); err == nil {
		t.Fatal("read of a missing blob succeeded")
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	deadHost := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	if err := c.ReadRange(testCtx(t), registry.Ref{Registry: dead.URL, Repo: "lib/app"}, rafs.Digest{1}, 0, make([]byte, 10)); err == nil {
		t.Fatal("read from a closed registry succeeded")
	}
	got := map[string]registry.Reach{}
	for _, r := range c.Reachability() {
		got[r.Host] = r
	}
	if r := got[strings.ToLower(reg.Host)]; r.Failing || r.LastAnswer.IsZero() {
		t.Errorf("the live registry: %+v, want answered and not failing", r)
	}
	if r := got[deadHost]; !r.Failing || r.LastError.IsZero() || !strings.Contains(r.Error, "refused") {
		t.Errorf("the closed registry: %+v, want failing with connection refused", r)
	}
}
