package cluster

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gate is one node's road to the registry: a reverse proxy on its own
// loopback port that counts the blob bytes the registry sends that node,
// and injects the faults a test sets on it. Every reference a node uses
// names its gate, so "bytes from the registry" is measured, and faults are
// injected, per node and outside the code under test.
type gate struct {
	host      string // "127.0.0.1:PORT"
	blobBytes atomic.Int64
	blobGets  atomic.Int64
	fault     atomic.Pointer[fault]
	spoiled   sync.Map // "path range" of the bodies flip spoiled
	// faulted counts the requests a fault was injected into.
	faulted atomic.Int64

	// events, while tracing, records what the gate did and when, for a
	// failing test to print: at most maxEvents, the first ones kept.
	eventsMu sync.Mutex
	tracing  bool
	events   []gateEvent

	// fetches, while recording, lists every blob GET the gate passed to
	// the registry, with its byte range and when it began and ended.
	fetchesMu sync.Mutex
	recording bool
	fetches   []blobFetch
}

// blobFetch is one blob GET a gate passed to the registry.
type blobFetch struct {
	blob        string // "sha256:<hex>"
	off, end    int64  // the bytes asked for, [off, end); end -1: to the end of the blob
	start, done time.Time
}

// record starts recording blob GETs afresh.
func (g *gate) record() {
	g.fetchesMu.Lock()
	g.recording, g.fetches = true, nil
	g.fetchesMu.Unlock()
}

// recorded stops recording and returns the blob GETs recorded.
func (g *gate) recorded() []blobFetch {
	g.fetchesMu.Lock()
	defer g.fetchesMu.Unlock()
	g.recording = false
	return g.fetches
}

// noteFetch records a blob GET of r that ran from start until now.
func (g *gate) noteFetch(r *http.Request, start time.Time) {
	g.fetchesMu.Lock()
	defer g.fetchesMu.Unlock()
	if !g.recording {
		return
	}
	_, blob, _ := strings.Cut(r.URL.Path, "/blobs/")
	off, end := parseRange(r.Header.Get("Range"))
	g.fetches = append(g.fetches, blobFetch{blob: blob, off: off, end: end, start: start, done: time.Now()})
}

// parseRange reads a "bytes=A-B" or "bytes=A-" header as [A, B+1) or
// [A, -1); anything else (none, several ranges, a suffix) as the whole
// blob, [0, -1), which is at least what the registry may send.
func parseRange(h string) (off, end int64) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, -1
	}
	a, b, _ := strings.Cut(spec, "-")
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return 0, -1
	}
	if b == "" {
		return first, -1
	}
	last, err := strconv.ParseInt(b, 10, 64)
	if err != nil || last < first {
		return 0, -1
	}
	return first, last + 1
}

type gateEvent struct {
	at   time.Time
	what string
}

const maxEvents = 4096

// trace starts recording events afresh.
func (g *gate) trace() {
	g.eventsMu.Lock()
	g.tracing, g.events = true, nil
	g.eventsMu.Unlock()
}

// untrace stops recording and returns the events recorded.
func (g *gate) untrace() []gateEvent {
	g.eventsMu.Lock()
	defer g.eventsMu.Unlock()
	g.tracing = false
	return g.events
}

// note records what, while tracing.
func (g *gate) note(what string) {
	g.eventsMu.Lock()
	if g.tracing && len(g.events) < maxEvents {
		g.events = append(g.events, gateEvent{at: time.Now(), what: what})
	}
	g.eventsMu.Unlock()
}

// requestLine names r in an event: method, path and range.
func requestLine(r *http.Request) string {
	return r.Method + " " + r.URL.Path + " " + r.Header.Get("Range")
}

// fault is what a gate does to the requests it passes; the zero value
// passes everything unchanged. Faults other than down touch only blob
// GETs (what a node reads chunks with), so that manifests and the
// registry's ping keep working unless the registry is down.
type fault struct {
	// down closes every connection without an answer, as a registry
	// that crashed or a broken link would.
	down bool
	// delay holds every blob GET this long before it goes on.
	delay time.Duration
	// every is the share of blob GETs the faults below hit: every n-th
	// one (counting all blob GETs through the gate). 0 or 1 is all.
	every int64
	// status answers the hit blob GETs with this code (a 5xx).
	status int
	// flip inverts one byte in the middle of the hit bodies: the right
	// length, the wrong bytes. Like a flip on the way, it spoils each
	// range of a blob once: a reader that retries exactly what failed
	// gets it (a reader gives up a chunk after three bad copies).
	flip bool
	// cut ends the hit bodies after half of their bytes and closes the
	// connection.
	cut bool
}

func startGate(t testing.TB, registryHost string) *gate {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: registryHost}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	// docker-registry writes absolute Location headers for its own host;
	// requests keep the gate's Host so that what it returns names the gate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{host: ln.Addr().String()}
	g.fault.Store(&fault{})
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f := g.fault.Load()
			if f.down {
				g.faulted.Add(1)
				g.note("aborted " + requestLine(r))
				panic(http.ErrAbortHandler) // the server closes the connection
			}
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
				g.note("passed " + requestLine(r))
				start := time.Now()
				defer g.noteFetch(r, start)
				n := g.blobGets.Add(1)
				if !g.blobFault(f, n, w, r, rp) {
					rp.ServeHTTP(&countingWriter{ResponseWriter: w, n: &g.blobBytes}, r)
				}
				return
			}
			rp.ServeHTTP(w, r)
		})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

// set switches the gate to f, for the requests that arrive from now on.
func (g *gate) set(f fault) { g.fault.Store(&f) }

// blobFault applies f to the n-th blob GET; it returns true if it
// answered the request itself.
func (g *gate) blobFault(f *fault, n int64, w http.ResponseWriter, r *http.Request, rp http.Handler) bool {
	if f.delay > 0 {
		g.faulted.Add(1)
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return true
		}
	}
	if f.every > 1 && n%f.every != 0 {
		return false
	}
	switch {
	case f.status != 0:
		g.faulted.Add(1)
		http.Error(w, "injected by the test's gate", f.status)
		return true
	case f.flip:
		if _, again := g.spoiled.LoadOrStore(r.URL.Path+" "+r.Header.Get("Range"), true); again {
			return false
		}
		fallthrough
	case f.cut:
		g.faulted.Add(1)
		rp.ServeHTTP(&faultWriter{ResponseWriter: w, n: &g.blobBytes, flip: f.flip, cut: f.cut}, r)
		return true
	}
	return false
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// faultWriter spoils a successful response body on its way: it inverts
// its middle byte (flip), or sends only its first half and then fails the
// write, which makes the reverse proxy abort the connection (cut). Error
// responses pass unchanged.
type faultWriter struct {
	http.ResponseWriter
	n         *atomic.Int64
	flip, cut bool
	status    int
	size      int64 // the body's length, from Content-Length; -1 unknown
	sent      int64
}

var errCut = errors.New("body cut short by the test's gate")

func (f *faultWriter) WriteHeader(code int) {
	f.status = code
	f.size = -1
	if n, err := strconv.ParseInt(f.Header().Get("Content-Length"), 10, 64); err == nil {
		f.size = n
	}
	f.ResponseWriter.WriteHeader(code)
}

func (f *faultWriter) Write(p []byte) (int, error) {
	if f.status == 0 {
		f.WriteHeader(http.StatusOK)
	}
	if f.status/100 != 2 || f.size <= 0 {
		return f.pass(p)
	}
	mid := f.size / 2
	if f.cut {
		if f.sent+int64(len(p)) <= mid {
			return f.pass(p)
		}
		n, err := f.pass(p[:mid-f.sent])
		if err != nil {
			return n, err
		}
		return n, errCut
	}
	if i := mid - f.sent; i >= 0 && i < int64(len(p)) {
		q := append([]byte(nil), p...)
		q[i] ^= 0xff
		p = q
	}
	return f.pass(p)
}

func (f *faultWriter) pass(p []byte) (int, error) {
	n, err := f.ResponseWriter.Write(p)
	f.sent += int64(n)
	f.n.Add(int64(n))
	return n, err
}

func (f *faultWriter) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}
