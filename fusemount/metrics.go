package fusemount

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"damselfly/rafs/cache"
)

// Sources a read can be served from.
const (
	SourceMemory   = "memory"   // decoded chunk already in the daemon
	SourceCache    = "cache"    // the node cache on disk
	SourceShared   = "shared"   // joined a fetch another reader started
	SourceProxy    = "proxy"    // the node's peer
	SourceRegistry = "registry" // the origin registry directly
	SourceOCI      = "oci"      // a local OCI layout
)

// Metrics are the mount daemon's counters, exported as Prometheus text on
// the control socket and summarised by `damselfly status`.
type Metrics struct {
	Registry       *prometheus.Registry
	reads          *prometheus.CounterVec
	readBytes      *prometheus.CounterVec
	readSeconds    *prometheus.HistogramVec
	backendBytes   *prometheus.CounterVec
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	cacheErrors    prometheus.Counter
	verifyFailures prometheus.Counter
	errors         prometheus.Counter
	inflight       prometheus.Gauge
	readahead      prometheus.Counter
	prefetchDone   prometheus.Gauge
	prefetchTotal  prometheus.Gauge
	// passthroughOpens counts opens answered in FUSE passthrough mode
	// (the kernel reads the file's copy; no READ reaches the daemon).
	passthroughOpens prometheus.Counter
	fileCopies       prometheus.Counter // file copies written
}

// NewMetrics registers the metrics on a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "damselfly_mount_reads_total",
			Help: "Chunk reads served, by source."}, []string{"source"}),
		readBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "damselfly_mount_read_bytes_total",
			Help: "Bytes returned to readers, by source."}, []string{"source"}),
		readSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "damselfly_mount_read_seconds",
			Help: "Latency of chunk reads, by source.", Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10)}, []string{"source"}),
		backendBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "damselfly_mount_backend_bytes_total",
			Help: "Stored bytes fetched from backends, by source."}, []string{"source"}),
		cacheHits:      prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_cache_hits_total", Help: "Node cache hits."}),
		cacheMisses:    prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_cache_misses_total", Help: "Node cache misses."}),
		cacheErrors:    prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_cache_write_errors_total", Help: "Failed node cache writes (disk full and others)."}),
		verifyFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_verify_failures_total", Help: "Fetched chunks that failed digest verification."}),
		errors:         prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_read_errors_total", Help: "Reads that failed (returned EIO)."}),
		inflight:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "damselfly_mount_fetches_in_flight", Help: "Backend requests in flight."}),
		readahead:      prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_readahead_fetches_total", Help: "Fetches started ahead of sequential readers (each of one chunk or a run of them)."}),
		prefetchDone:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "damselfly_mount_prefetch_done_chunks", Help: "Prefetch progress: chunks handled."}),
		prefetchTotal:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "damselfly_mount_prefetch_total_chunks", Help: "Prefetch progress: chunks planned."}),
		passthroughOpens: prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_passthrough_opens_total",
			Help: "Opens answered in FUSE passthrough mode: the kernel reads the file's decoded copy, not the daemon."}),
		fileCopies: prometheus.NewCounter(prometheus.CounterOpts{Name: "damselfly_mount_file_copies_written_total",
			Help: "Decoded file copies written for passthrough."}),
	}
	// The Go runtime's figures (go_goroutines, heap) as the peer and the
	// scheduler export them: a long-running daemon's leaks show there first.
	r.MustRegister(collectors.NewGoCollector())
	r.MustRegister(m.reads, m.readBytes, m.readSeconds, m.backendBytes, m.cacheHits, m.cacheMisses, m.cacheErrors,
		m.verifyFailures, m.errors, m.inflight, m.readahead, m.prefetchDone, m.prefetchTotal, m.passthroughOpens, m.fileCopies)
	return m
}

func (m *Metrics) observeRead(src string, n int, d time.Duration) {
	m.reads.WithLabelValues(src).Inc()
	m.readBytes.WithLabelValues(src).Add(float64(n))
	m.readSeconds.WithLabelValues(src).Observe(d.Seconds())
}

// watchCache exports the node cache's size and eviction counters.
func (m *Metrics) watchCache(c *cache.Cache) {
	gauge := func(name, help string, v func(cache.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(c.Stats()) })
	}
	m.Registry.MustRegister(
		gauge("damselfly_cache_bytes", "Bytes in the node cache (this process's view).", func(s cache.Stats) float64 { return float64(s.Bytes) }),
		gauge("damselfly_cache_entries", "Chunks in the node cache (this process's view).", func(s cache.Stats) float64 { return float64(s.Entries) }),
		gauge("damselfly_cache_capacity_bytes", "Node cache capacity.", func(s cache.Stats) float64 { return float64(s.Capacity) }),
		gauge("damselfly_cache_evictions", "Chunks evicted by this process.", func(s cache.Stats) float64 { return float64(s.Evictions) }),
		gauge("damselfly_cache_corrupt", "Cache entries found corrupt and removed.", func(s cache.Stats) float64 { return float64(s.Corrupt) }),
	)
}

// watchFileCopies exports the file copy store's size.
func (m *Metrics) watchFileCopies(fc *fileCopies) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "damselfly_file_copies_bytes", Help: "Bytes of decoded file copies (this process's view)."},
			func() float64 { b, _, _ := fc.Stats(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "damselfly_file_copies", Help: "Decoded file copies (this process's view)."},
			func() float64 { _, n, _ := fc.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "damselfly_file_copies_evicted", Help: "File copies evicted by this process."},
			func() float64 { _, _, e := fc.Stats(); return float64(e) }),
	)
}
