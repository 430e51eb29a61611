package backend

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"go.uber.org/goleak"

	"damselfly/rafs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testRepo = "library/app"

// origin is an in-process registry (go-containerregistry pkg/registry)
// behind an httptest server on 127.0.0.1, with a hook in front of blob
// GETs to inject faults and optional wrappers (auth) around everything.
type origin struct {
	srv  *httptest.Server
	reg  http.Handler
	mem  gcrregistry.BlobHandler
	gets atomic.Int64 // blob GETs that reached the hook
	hook atomic.Pointer[hookFunc]
}

// hookFunc sees the n-th blob GET (from 1); it returns true if it
// answered, false to let the registry answer (possibly after changing r).
type hookFunc func(n int64, w http.ResponseWriter, r *http.Request) bool

func newOrigin(t *testing.T, wrap ...func(http.Handler) http.Handler) *origin {
	t.Helper()
	o := &origin{mem: gcrregistry.NewInMemoryBlobHandler()}
	o.reg = gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0)), gcrregistry.WithBlobHandler(o.mem))
	var h http.Handler = http.HandlerFunc(o.serve)
	for _, w := range wrap {
		h = w(h)
	}
	o.srv = httptest.NewServer(h)
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
		n := o.gets.Add(1)
		if h := o.hook.Load(); h != nil && (*h)(n, w, r) {
			return
		}
	}
	o.reg.ServeHTTP(w, r)
}

func (o *origin) host() string       { return strings.TrimPrefix(o.srv.URL, "http://") }
func (o *origin) setHook(h hookFunc) { o.hook.Store(&h) }
func (o *origin) config() Config     { return testConfig(o.host()) }
func (o *origin) put(t *testing.T, data []byte) rafs.Blob {
	t.Helper()
	sum := sha256.Sum256(data)
	h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum[:])}
	if err := o.mem.(gcrregistry.BlobPutHandler).Put(t.Context(), testRepo, h, io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("put blob: %v", err)
	}
	return rafs.Blob{Digest: sum, CompressedSize: uint64(len(data))}
}

// testConfig is a registry config for host with timeouts fit for tests.
func testConfig(host string) Config {
	c := Default()
	c.Host, c.Repo, c.Timeout, c.Deadline = host, testRepo, 5*time.Second, 20*time.Second
	return c
}

func newBackend(t *testing.T, cfg Config, opts ...Option) *Backend {
	t.Helper()
	b, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// randomBytes is n deterministic pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// readAt reads [off, off+n) through b and checks the bytes against data.
func readAt(t *testing.T, b *Backend, blob rafs.Blob, data []byte, off int64, n int) Source {
	t.Helper()
	p := make([]byte, n)
	src, err := b.ReadBlobFrom(t.Context(), blob, off, p)
	if err != nil {
		t.Fatalf("read %d+%d: %v", off, n, err)
	}
	if !bytes.Equal(p, data[off:off+int64(n)]) {
		t.Fatalf("read %d+%d from %s: wrong bytes", off, n, src)
	}
	return src
}

// closedPort is a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// stepClock is a Clock on which waiting takes no time: After moves the
// clock forward by d and fires at once. Only for backends without a proxy
// (the health checker would spin on it).
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	waited []time.Duration
}

func newStepClock() *stepClock { return &stepClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waited = append(c.waited, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *stepClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waited...)
}

// mirror is a fake local peer: /healthz answers 200 while up, and blob
// GETs are served from the origin's store (not through the origin's
// server) while up, 503 otherwise. It requires X-Damselfly-Registry to
// name the origin and records the Authorization it was given.
type mirror struct {
	srv      *httptest.Server
	up       atomic.Bool
	blobGets atomic.Int64
	lastAuth atomic.Pointer[string]
	badHdr   atomic.Int64
}

func newMirror(t *testing.T, o *origin, up bool) *mirror {
	t.Helper()
	return newMirrorStore(t, o, o.reg, up)
}

// newMirrorStore is newMirror serving blobs from store.
func newMirrorStore(t *testing.T, o *origin, store http.Handler, up bool) *mirror {
	t.Helper()
	m := &mirror{}
	m.up.Store(up)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.up.Load() {
			http.Error(w, "peer restarting", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/healthz" {
			return
		}
		if got, want := r.Header.Get(HeaderRegistry), "http://"+o.host(); got != want {
			m.badHdr.Add(1)
			http.Error(w, fmt.Sprintf("%s %q, want %q", HeaderRegistry, got, want), http.StatusBadRequest)
			return
		}
		m.blobGets.Add(1)
		a := r.Header.Get("Authorization")
		m.lastAuth.Store(&a)
		store.ServeHTTP(w, r)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// tokenServer is a bearer-token registry front: /token issues tokens for
// Basic user:pass, and every other request needs a live token. A token is
// good for uses requests, or for ttl after issue, whichever is set.
// Expired tokens get 401 with a Bearer challenge if challengeOnExpiry,
// a bare 401 otherwise (as some proxies in front of registries do).
type tokenServer struct {
	user, pass        string
	uses              int
	ttl               time.Duration
	challengeOnExpiry bool

	mu      sync.Mutex
	tokens  map[string]*issuedToken
	issued  atomic.Int64
	expired atomic.Int64
}

type issuedToken struct {
	uses int
	at   time.Time
}

func (ts *tokenServer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			ts.token(w, r)
			return
		}
		auth := r.Header.Get("Authorization")
		if ts.valid(auth) {
			next.ServeHTTP(w, r)
			return
		}
		if auth == "" || ts.challengeOnExpiry {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="test",scope="repository:%s:pull"`, r.Host, testRepo))
		}
		if auth != "" {
			ts.expired.Add(1)
		}
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
	})
}

func (ts *tokenServer) token(w http.ResponseWriter, r *http.Request) {
	if u, p, ok := r.BasicAuth(); !ok || u != ts.user || p != ts.pass {
		http.Error(w, "bad credentials", http.StatusUnauthorized)
		return
	}
	tok := fmt.Sprintf("tok-%d", ts.issued.Add(1))
	ts.mu.Lock()
	if ts.tokens == nil {
		ts.tokens = map[string]*issuedToken{}
	}
	ts.tokens[tok] = &issuedToken{uses: ts.uses, at: time.Now()}
	ts.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_in": 60})
}

func (ts *tokenServer) valid(auth string) bool {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	it := ts.tokens[tok]
	switch {
	case it == nil:
		return false
	case ts.ttl > 0 && time.Since(it.at) > ts.ttl:
		return false
	case ts.uses > 0:
		if it.uses == 0 {
			return false
		}
		it.uses--
	}
	return true
}

// basicAuth requires Basic user:pass on every request.
func basicAuth(user, pass string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func b64(s string) Secret { return Secret(base64.StdEncoding.EncodeToString([]byte(s))) }
