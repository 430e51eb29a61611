package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus collectors.
type metrics struct {
	requests      *prometheus.CounterVec // route, code
	bytes         *prometheus.CounterVec // route
	batchChunks   prometheus.Histogram   // chunks per batch request
	upstreamBytes prometheus.Counter     // pass-through body bytes
	peerBlobBytes prometheus.Counter     // plain blob bytes served from pieces
	authz         *prometheus.CounterVec // decision
	storedServed  *prometheus.CounterVec // by: digest or tag
	collectors    []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "damselfly", Subsystem: "proxy", Name: "requests_total",
			Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "damselfly", Subsystem: "proxy", Name: "response_bytes_total",
			Help: "Response body bytes written, by route.",
		}, []string{"route"}),
		batchChunks: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "damselfly", Subsystem: "proxy", Name: "batch_chunks",
			Help:    "Chunks asked for per batch request.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		upstreamBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "damselfly", Subsystem: "proxy", Name: "upstream_passthrough_bytes_total",
			Help: "Body bytes passed through from upstream registries to clients.",
		}),
		peerBlobBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "damselfly", Subsystem: "proxy", Name: "plain_blob_piece_bytes_total",
			Help: "Plain blob bytes served to clients from pieces (node cache and peers) instead of the upstream registry.",
		}),
	}
	m.authz = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "damselfly", Subsystem: "proxy", Name: "authorizations_total",
		Help: "Requests for blob bytes from the node or its peers, by decision: allowed (fresh, stale, grant) or refused (origin, unreachable).",
	}, []string{"decision"})
	m.storedServed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "damselfly", Subsystem: "proxy", Name: "manifests_from_store_total",
		Help: "Manifests served from the node's manifest store while the origin registry could not be reached, by what the client asked for: digest or tag (a stale resolution).",
	}, []string{"by"})
	m.collectors = []prometheus.Collector{m.requests, m.bytes, m.batchChunks, m.upstreamBytes, m.peerBlobBytes, m.authz, m.storedServed}
	for _, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}

// instrument counts requests, codes and bytes of route, and gives every
// body write stall to complete.
func (m *metrics) instrument(route string, stall time.Duration, h http.Handler) http.Handler {
	bytes := m.bytes.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: stall}
		h.ServeHTTP(sw, r)
		// The server flushes what is buffered after the handler returns;
		// the connection keeps this deadline, and the next response on it
		// sets its own before writing.
		sw.extend()
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		bytes.Add(float64(sw.n))
	})
}

// statusWriter records the status code and body bytes of a response.
// Unwrap lets http.ResponseController reach Flush and deadlines.
type statusWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	code  int
	n     int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

// extend gives the next write stall to complete.
func (w *statusWriter) extend() { w.rc.SetWriteDeadline(time.Now().Add(w.stall)) }

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.extend()
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// authorize counts a gate decision.
func (m *metrics) authorize(d decision) {
	m.authz.WithLabelValues(d.how).Inc()
}
