package backend

import (
	"bytes"
	"damselfly/rafs/rafstest"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestProxyHealthyServesEverything(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(20, 256<<10)
	blob := o.put(t, data)
	m := newMirror(t, o, true)
	cfg := o.config()
	cfg.Auth = b64("alice:secret")
	cfg.Proxy = ProxyConfig{URL: m.srv.URL, Fallback: true, CheckInterval: 20 * time.Millisecond}
	b := newBackend(t, cfg)
	const reads = 20
	for i := range reads {
		off := int64(i * 10000)
		if src := readAt(t, b, blob, data, off, 5000); src != SourceProxy {
			t.Fatalf("read %d: source %s, want %s", i, src, SourceProxy)
		}
	}
	if n := o.gets.Load(); n != 0 {
		t.Errorf("registry saw %d blob GETs, want 0", n)
	}
	if n := m.badHdr.Load(); n != 0 {
		t.Errorf("%d proxy requests without the right %s", n, HeaderRegistry)
	}
	if got, want := *m.lastAuth.Load(), "Basic "+cfg.Auth.Reveal(); got != want {
		t.Errorf("Authorization forwarded to the proxy: got %q, want %q", got, want)
	}
	st := b.Stats()
	if want := (SourceStats{Requests: reads, Bytes: reads * 5000}); st.Proxy != want || st.Registry != (SourceStats{}) || st.Fallbacks != 0 || !st.ProxyHealthy {
		t.Errorf("stats: got %+v, want %d proxy requests only, proxy healthy", st, reads)
	}
}

func TestProxyDownFallsBack(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(21, 64<<10)
	blob := o.put(t, data)
	var pings atomic.Int64
	ping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		pings.Add(1)
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	t.Cleanup(ping.Close)
	var logs syncBuffer
	cfg := o.config()
	cfg.Proxy = ProxyConfig{URL: "http://" + closedPort(t), PingURL: ping.URL, Fallback: true, CheckInterval: 5 * time.Millisecond}
	b := newBackend(t, cfg, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for i := range 10 {
		if src := readAt(t, b, blob, data, int64(i*1000), 1000); src != SourceRegistry {
			t.Fatalf("read %d: source %s, want %s", i, src, SourceRegistry)
		}
	}
	rafstest.Eventually(t, 10*time.Second, "several failed health checks", func() bool { return pings.Load() >= 5 })
	st := b.Stats()
	if st.ProxyHealthy || st.Fallbacks != 10 || st.Registry.Requests != 10 || st.Registry.Errors != 0 {
		t.Errorf("stats: got %+v, want proxy unhealthy and 10 fallbacks served by the registry", st)
	}
	if st.Proxy.Requests > 1 {
		t.Errorf("proxy requests: got %d, want at most the first (later ones skip an unhealthy proxy)", st.Proxy.Requests)
	}
	if n := strings.Count(logs.String(), "backend proxy unhealthy"); n != 1 {
		t.Errorf("logged the proxy unhealthy %d times, want once:\n%s", n, logs.String())
	}
}

func TestProxyRecovers(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(22, 64<<10)
	blob := o.put(t, data)
	m := newMirror(t, o, false)
	var logs syncBuffer
	cfg := o.config()
	cfg.Proxy = ProxyConfig{URL: m.srv.URL, Fallback: true, CheckInterval: 10 * time.Millisecond}
	b := newBackend(t, cfg, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))

	if src := readAt(t, b, blob, data, 0, 1000); src != SourceRegistry {
		t.Fatalf("proxy down: source %s, want %s", src, SourceRegistry)
	}
	m.up.Store(true)
	rafstest.Eventually(t, 10*time.Second, "the proxy to be healthy again", func() bool { return b.Stats().ProxyHealthy })
	for i := range 5 {
		if src := readAt(t, b, blob, data, int64(i*100), 100); src != SourceProxy {
			t.Fatalf("proxy back: source %s, want %s", src, SourceProxy)
		}
	}
	m.up.Store(false)
	rafstest.Eventually(t, 10*time.Second, "the proxy to be unhealthy again", func() bool { return !b.Stats().ProxyHealthy })
	if src := readAt(t, b, blob, data, 0, 1000); src != SourceRegistry {
		t.Fatalf("proxy down again: source %s, want %s", src, SourceRegistry)
	}
	st := b.Stats()
	if st.Fallbacks != 2 || st.Proxy.Bytes != 500 || m.blobGets.Load() != 5 {
		t.Errorf("stats: got %+v (proxy served %d), want 2 fallbacks and 5 proxy reads", st, m.blobGets.Load())
	}
	// One log line per change: down, up, down.
	if got := strings.Count(logs.String(), "backend proxy unhealthy"); got != 2 {
		t.Errorf("unhealthy logged %d times, want 2:\n%s", got, logs.String())
	}
	if got := strings.Count(logs.String(), "backend proxy healthy"); got != 1 {
		t.Errorf("healthy logged %d times, want 1:\n%s", got, logs.String())
	}
}

func TestProxyWithoutFallbackWaitsForDeadline(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	blob := o.put(t, randomBytes(23, 1000))
	proxyAddr := closedPort(t)
	cfg := o.config()
	cfg.Deadline = 500 * time.Millisecond
	cfg.Proxy = ProxyConfig{URL: "http://" + proxyAddr, Fallback: false, CheckInterval: 20 * time.Millisecond}
	b := newBackend(t, cfg)
	start := time.Now()
	src, err := b.ReadBlobFrom(t.Context(), blob, 0, make([]byte, 100))
	elapsed := time.Since(start)
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("got %v, want ErrDeadline", err)
	}
	if src != SourceProxy {
		t.Errorf("source: got %q, want %q", src, SourceProxy)
	}
	if elapsed < cfg.Deadline {
		t.Errorf("gave up after %s, want no sooner than the deadline %s", elapsed, cfg.Deadline)
	}
	if !strings.Contains(err.Error(), "via proxy http://"+proxyAddr) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("got %q, want the proxy and the last failure named", err)
	}
	st := b.Stats()
	if st.Registry.Requests != 0 || st.Fallbacks != 0 || st.Proxy.Requests < 2 || st.Proxy.Retries != st.Proxy.Requests-1 {
		t.Errorf("stats: got %+v, want only retried proxy requests", st)
	}
	if n := o.gets.Load(); n != 0 {
		t.Errorf("registry saw %d blob GETs, want 0", n)
	}
}

// A proxy that answers 404 (it could not find the blob upstream) does not
// fail the read while fallback is on: the registry is the authority.
func TestProxyNotFoundFallsBack(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(24, 1000)
	blob := o.put(t, data)
	m := newMirrorStore(t, o, newOrigin(t).reg, true) // an empty store
	cfg := o.config()
	cfg.Proxy = ProxyConfig{URL: m.srv.URL, Fallback: true, CheckInterval: time.Hour}
	b := newBackend(t, cfg)
	if src := readAt(t, b, blob, data, 10, 10); src != SourceRegistry {
		t.Fatalf("source: got %s, want %s", src, SourceRegistry)
	}
	if st := b.Stats(); !st.ProxyHealthy || st.Proxy.Errors != 1 || st.Fallbacks != 1 {
		t.Errorf("stats: got %+v, want one proxy error, one fallback, proxy still healthy", st)
	}

	// Without fallback the 404 fails the read at once.
	cfg.Proxy.Fallback = false
	b = newBackend(t, cfg)
	if _, err := b.ReadBlobFrom(t.Context(), blob, 10, make([]byte, 10)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("without fallback: got %v, want ErrNotFound", err)
	}
	if st := b.Stats(); st.Proxy.Requests != 1 || st.Registry.Requests != 0 {
		t.Errorf("without fallback: stats %+v, want one proxy request", st)
	}
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Once the backend has talked to a token-auth registry, the proxy gets the
// same bearer token, so the mirror can fetch upstream on the reader's
// behalf.
func TestProxyGetsRegistryToken(t *testing.T) {
	t.Parallel()
	ts := &tokenServer{user: "alice", pass: "secret"}
	o := newOrigin(t, ts.wrap)
	data := randomBytes(25, 1000)
	blob := o.put(t, data)
	m := newMirror(t, o, false)
	cfg := o.config()
	cfg.Auth = b64("alice:secret")
	cfg.Proxy = ProxyConfig{URL: m.srv.URL, Fallback: true, CheckInterval: 10 * time.Millisecond}
	b := newBackend(t, cfg)
	if src := readAt(t, b, blob, data, 0, 10); src != SourceRegistry {
		t.Fatalf("proxy down: source %s, want %s", src, SourceRegistry)
	}
	m.up.Store(true)
	rafstest.Eventually(t, 10*time.Second, "the proxy to be healthy", func() bool { return b.Stats().ProxyHealthy })
	if src := readAt(t, b, blob, data, 10, 10); src != SourceProxy {
		t.Fatalf("proxy up: source %s, want %s", src, SourceProxy)
	}
	if got, want := *m.lastAuth.Load(), "Bearer tok-1"; got != want {
		t.Errorf("Authorization forwarded to the proxy: got %q, want %q", got, want)
	}
}
