package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

func TestReadRanges(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(1, 1<<20+123)
	blob := o.put(t, data)
	b := newBackend(t, o.config())
	size := int64(len(data))
	tests := []struct {
		name string
		off  int64
		n    int
	}{
		{"first byte", 0, 1},
		{"last byte", size - 1, 1},
		{"whole blob", 0, len(data)},
		{"middle", 4096, 65536},
		{"to the end", size - 1000, 1000},
		{"odd", 12345, 678},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if src := readAt(t, b, blob, data, tt.off, tt.n); src != SourceRegistry {
				t.Errorf("source: got %s, want %s", src, SourceRegistry)
			}
		})
	}
	// Many random ranges, concurrently.
	r := rand.New(rand.NewPCG(2, 3))
	var g errgroup.Group
	g.SetLimit(8)
	const random = 200
	for range random {
		off := r.Int64N(size)
		n := 1 + r.IntN(int(min(size-off, 200<<10)))
		g.Go(func() error {
			p := make([]byte, n)
			if err := b.ReadBlob(t.Context(), blob, off, p); err != nil {
				return err
			}
			if string(p) != string(data[off:off+int64(n)]) {
				return fmt.Errorf("read %d+%d: wrong bytes", off, n)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	st := b.Stats().Registry
	if want := uint64(len(tests) + random); st.Requests != want || st.Errors != 0 || st.Retries != 0 {
		t.Errorf("stats: got %+v, want %d requests and no errors or retries", st, want)
	}
	// An empty read asks nobody.
	if err := b.ReadBlob(t.Context(), blob, 10, nil); err != nil {
		t.Errorf("empty read: %v", err)
	}
}

// A registry (or a CDN in front of one) that ignores Range answers 200
// with the whole blob; the reader skips to the offset.
func TestReadIgnoredRange(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(4, 300<<10)
	blob := o.put(t, data)
	o.setHook(func(_ int64, _ http.ResponseWriter, r *http.Request) bool {
		r.Header.Del("Range")
		return false
	})
	b := newBackend(t, o.config())
	for _, rg := range [][2]int{{0, 10}, {1000, 4096}, {len(data) - 7, 7}, {0, len(data)}} {
		readAt(t, b, blob, data, int64(rg[0]), rg[1])
	}
	if st := b.Stats().Registry; st.Errors != 0 {
		t.Errorf("stats: got %+v, want no errors", st)
	}
}

func TestReadRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	data := randomBytes(5, 64<<10)
	const off, n = 1000, 5000
	writePartial := func(w http.ResponseWriter, body []byte, contentLength int) {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, len(data)))
		w.Header().Set("Content-Length", strconv.Itoa(contentLength))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(body)
	}
	tests := []struct {
		name     string
		failures int64 // the first GETs that fail
		fail     func(w http.ResponseWriter, r *http.Request)
		// merged: net/http itself retries a GET whose reused connection
		// closed before any answer, so the reader may see fewer failures.
		merged bool
	}{
		{"503 twice", 2, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
		}, false},
		{"429 with Retry-After", 1, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "2")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}, false},
		{"connection dropped mid-body", 1, func(w http.ResponseWriter, _ *http.Request) {
			writePartial(w, data[off:off+n/2], n) // the server then closes the connection
		}, false},
		{"honest short body", 2, func(w http.ResponseWriter, _ *http.Request) {
			writePartial(w, data[off:off+n/2], n/2)
		}, false},
		{"truncated whole-blob answer", 1, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data[:off+10])
		}, false},
		{"wrong Content-Range", 1, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", n-1, len(data)))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[:n])
		}, false},
		{"connection closed without an answer", 2, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t)
			blob := o.put(t, data)
			o.setHook(func(i int64, w http.ResponseWriter, r *http.Request) bool {
				if i > tt.failures {
					return false
				}
				tt.fail(w, r)
				return true
			})
			clock := newStepClock()
			b := newBackend(t, o.config(), WithClock(clock))
			readAt(t, b, blob, data, off, n)
			got, fails := b.Stats().Registry, uint64(tt.failures)
			if tt.merged && got.Errors >= 1 && got.Errors <= fails {
				fails = got.Errors
			}
			want := SourceStats{Requests: fails + 1, Bytes: n, Errors: fails, Retries: fails}
			if got != want {
				t.Errorf("stats: got %+v, want %+v", got, want)
			}
			if got := len(clock.waits()); got != int(fails) {
				t.Errorf("backoff waits: got %d (%v), want %d", got, clock.waits(), fails)
			}
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(6, 100)
	blob := o.put(t, data)
	o.setHook(func(i int64, w http.ResponseWriter, _ *http.Request) bool {
		if i == 1 {
			w.Header().Set("Retry-After", "2")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		}
		return false
	})
	clock := newStepClock()
	b := newBackend(t, o.config(), WithClock(clock))
	readAt(t, b, blob, data, 0, 100)
	if w := clock.waits(); len(w) != 1 || w[0] != 2*time.Second {
		t.Errorf("waits: got %v, want [2s]", w)
	}
}

func TestReadFailsFast(t *testing.T) {
	t.Parallel()
	data := randomBytes(7, 4096)
	tests := []struct {
		name         string
		blob         func(known rafs.Blob) rafs.Blob
		off          int64
		n            int
		hook         hookFunc
		want         error
		wantRequests uint64
	}{
		{"404", func(rafs.Blob) rafs.Blob { return rafs.Blob{Digest: rafs.Digest{1, 2, 3}} }, 0, 10, nil, ErrNotFound, 1},
		{"416 from the registry", func(k rafs.Blob) rafs.Blob { k.CompressedSize = 0; return k }, 4000, 200, nil, ErrRange, 1},
		{"range past the known size", func(k rafs.Blob) rafs.Blob { return k }, 4000, 200, nil, ErrRange, 0},
		{"negative offset", func(k rafs.Blob) rafs.Blob { return k }, -1, 10, nil, ErrRange, 0},
		{"400", func(k rafs.Blob) rafs.Blob { return k }, 0, 10, func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
			http.Error(w, `{"errors":[{"code":"DIGEST_INVALID"}]}`, http.StatusBadRequest)
			return true
		}, ErrBadRequest, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t)
			blob := tt.blob(o.put(t, data))
			if tt.hook != nil {
				o.setHook(tt.hook)
			}
			clock := newStepClock()
			b := newBackend(t, o.config(), WithClock(clock))
			_, err := b.ReadBlobFrom(t.Context(), blob, tt.off, make([]byte, tt.n))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			var re *ReadError
			if !errors.As(err, &re) || re.Digest != blob.Digest || re.Repo != testRepo || re.Registry != "http://"+o.host() {
				t.Errorf("got %#v, want a *ReadError naming the blob, registry and repository", err)
			}
			if !strings.Contains(err.Error(), blob.Digest.String()) || !strings.Contains(err.Error(), o.host()) {
				t.Errorf("got %q, want the digest and host in the message", err)
			}
			if got := b.Stats().Registry.Requests; got != tt.wantRequests {
				t.Errorf("requests: got %d, want %d", got, tt.wantRequests)
			}
			if w := clock.waits(); len(w) != 0 {
				t.Errorf("waited %v, want no retries", w)
			}
		})
	}
}

func TestReadGivesUpAtDeadline(t *testing.T) {
	t.Parallel()
	host := closedPort(t)
	clock := newStepClock()
	cfg := testConfig(host)
	cfg.Deadline = DefaultDeadline // 3m: instant on the step clock
	b := newBackend(t, cfg, WithClock(clock))
	blob := rafs.Blob{Digest: rafs.Digest{0xde, 0xad}, CompressedSize: 1000}
	start := clock.Now()
	src, err := b.ReadBlobFrom(t.Context(), blob, 10, make([]byte, 100))
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("got %v, want ErrDeadline", err)
	}
	if src != SourceRegistry {
		t.Errorf("source: got %q, want %q", src, SourceRegistry)
	}
	if elapsed := clock.Now().Sub(start); elapsed < DefaultDeadline {
		t.Errorf("gave up after %s of clock time, want at least %s", elapsed, DefaultDeadline)
	}
	for _, w := range []string{"bytes 10-109", blob.Digest.String(), "registry http://" + host, "repository " + testRepo, "retry deadline exceeded (3m0s)", "connection refused"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("got %q, want it to contain %q", err, w)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("got %v, which reads as a cancelled caller", err)
	}
	st := b.Stats().Registry
	if st.Requests < 30 || st.Errors != st.Requests || st.Retries != st.Requests-1 {
		t.Errorf("stats: got %+v, want >= 30 failed requests (backoff capped at 5s over 3m)", st)
	}
	for _, w := range clock.waits() {
		if w > backoffMax {
			t.Errorf("waited %s, longer than the backoff cap %s", w, backoffMax)
		}
	}
}

// The registry restarts in the middle of a read: the read waits it out.
func TestReadSurvivesRegistryRestart(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	data := randomBytes(8, 10000)
	blob := o.put(t, data)
	b := newBackend(t, o.config())
	readAt(t, b, blob, data, 0, 100) // handshake done, connections pooled
	addr := o.srv.Listener.Addr().String()
	o.srv.Close()

	got := make(chan error, 1)
	go func() {
		p := make([]byte, 500)
		_, err := b.ReadBlobFrom(context.Background(), blob, 42, p)
		if err == nil && string(p) != string(data[42:542]) {
			err = errors.New("wrong bytes")
		}
		got <- err
	}()
	rafstest.Eventually(t, 10*time.Second, "a failed attempt on the stopped registry", func() bool { return b.Stats().Registry.Errors > 0 })
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("restart the registry on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(o.srv.Config.Handler)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	if err := <-got; err != nil {
		t.Fatalf("read across the restart: %v", err)
	}
}

func TestCancelStopsRetries(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	blob := o.put(t, randomBytes(9, 100))
	ctx, cancel := context.WithCancel(t.Context())
	var once sync.Once
	o.setHook(func(i int64, w http.ResponseWriter, _ *http.Request) bool {
		if i == 2 {
			once.Do(cancel) // while this request is in flight
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	})
	cfg := o.config()
	cfg.Deadline = time.Hour
	b := newBackend(t, cfg)
	start := time.Now()
	_, err := b.ReadBlobFrom(ctx, blob, 0, make([]byte, 10))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "last failure") {
		t.Errorf("got %q, want the last failure in the message", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned %s after the start, want promptly after the cancel", d)
	}
	if n := o.gets.Load(); n > 3 {
		t.Errorf("%d requests, want no more after the cancel", n)
	}
}

func TestClosedBackend(t *testing.T) {
	t.Parallel()
	o := newOrigin(t)
	blob := o.put(t, randomBytes(10, 100))
	b, err := New(o.config())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.ReadBlob(t.Context(), blob, 0, make([]byte, 10)); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

// hang answers a request only when its client goes away (or after a
// minute, so that a broken test still ends), counting the requests it
// saw end that way.
type hang struct{ gone atomic.Int64 }

func (h *hang) wait(r *http.Request) {
	// The server watches for the client going away only once the body
	// is read, as the peer's batch endpoint reads it first.
	io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
		h.gone.Add(1)
	case <-time.After(time.Minute):
	}
}

// Config.Deadline bounds the whole read: an attempt still in flight when
// it passes is stopped there (the server sees its client go away), not
// left to run to Config.Timeout, and the read fails with ErrDeadline.
func TestDeadlineStopsAttemptInFlight(t *testing.T) {
	t.Parallel()
	const deadline = 400 * time.Millisecond
	for _, tt := range []struct {
		name   string
		proxy  bool // through a proxy whose every chunk or blob request hangs
		chunks bool // ReadChunksFrom (the batch endpoint) rather than ReadBlobFrom
		src    Source
	}{
		{"registry range", false, false, SourceRegistry},
		{"registry run", false, true, SourceRegistry},
		{"proxy range", true, false, SourceProxy},
		{"proxy batch", true, true, SourceProxy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t)
			cb := newChunkedBlob(31, 3000, 4000)
			o.put(t, cb.data)
			h := &hang{}
			cfg := o.config()
			cfg.Timeout = 30 * time.Second // far beyond the deadline
			cfg.Deadline = deadline
			if tt.proxy {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/healthz" {
						h.wait(r)
					}
				}))
				t.Cleanup(srv.Close)
				cfg.Proxy = ProxyConfig{URL: srv.URL, Fallback: false, CheckInterval: time.Second}
			} else {
				o.setHook(func(_ int64, _ http.ResponseWriter, r *http.Request) bool {
					h.wait(r)
					return true
				})
			}
			b := newBackend(t, cfg)
			start := time.Now()
			var (
				src Source
				err error
			)
			if tt.chunks {
				src, err = b.ReadChunksFrom(t.Context(), cb.blob, cb.chunks, func(int, rafs.Chunk, []byte) error { return nil })
			} else {
				src, err = b.ReadBlobFrom(t.Context(), cb.blob, 0, make([]byte, 100))
			}
			elapsed := time.Since(start)
			if !errors.Is(err, ErrDeadline) {
				t.Fatalf("got %v, want ErrDeadline", err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, which reads as a caller's deadline", err)
			}
			if src != tt.src {
				t.Errorf("source: got %q, want %q", src, tt.src)
			}
			// Generous for a loaded machine under -race; without the bound
			// the attempt would run to its 30s timeout.
			if elapsed < deadline || elapsed > deadline+5*time.Second {
				t.Errorf("failed after %s, want soon after the %s deadline", elapsed, deadline)
			}
			if !strings.Contains(err.Error(), "attempt in flight was stopped") || !strings.Contains(err.Error(), cb.blob.Digest.String()) {
				t.Errorf("got %q, want it to name the blob and the stopped attempt", err)
			}
			rafstest.Eventually(t, 10*time.Second, "the server to see the request stopped", func() bool { return h.gone.Load() >= 1 })
		})
	}
}
