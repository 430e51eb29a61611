package fetch

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Sources a chunk is delivered from, as metric labels and Stats fields.
const (
	SourceCache  = "cache"
	SourcePeer   = "peer"
	SourceOrigin = "origin"
)

// Stats counts an engine's (and its node's) work since it started.
type Stats struct {
	CacheBytes, PeerBytes, OriginBytes    int64 // stored bytes delivered, by source
	CacheChunks, PeerChunks, OriginChunks int64 // chunks delivered, by source
	OriginRequests                        int64 // ranged GETs sent to the origin
	UnscheduledOrigin                     int64 // origin GETs started without a turn from the Router
	OriginFetched                         int64 // bytes those returned
	Failures                              int64 // ReadChunks calls that failed
	BadPeers                              int64 // peers reported for bad bytes
	Collapsed                             int64 // chunk misses that joined another read's fetch
	Hedges                                int64 // requests to a slow parent sent a second time, elsewhere
	SlowPeers                             int64 // parents cut off for making no progress in time
	DuplicateBytes                        int64 // stored bytes that arrived second (hedged) and were dropped
	HoldingsDropped                       int64 // held chunks found gone and dropped (told the Router)
	StrayTurns                            int64 // origin turns given back for chunks that had come another way
	LivePeerBytes                         int64 // stored bytes of plain pieces live pulls fetched from peers (then delivered from the cache)
	ClaimHandovers                        int64 // chunks of a claimed fetch (Engine.Claim) that stalled or failed, handed to the engine's own fetch
}

// Metrics holds the counters of an engine and of the node around it
// (holdings dropped, plain blobs recorded): atomics for Stats and
// Prometheus collectors for the daemon's /metrics. Safe for concurrent
// use.
type Metrics struct {
	bytes, chunks     [3]atomic.Int64 // by source index
	originRequests    atomic.Int64
	livePeer          atomic.Int64
	unscheduled       atomic.Int64
	originFetched     atomic.Int64
	failures          atomic.Int64
	badPeers          atomic.Int64
	collapsed         atomic.Int64
	claimHandovers    atomic.Int64
	hedges            atomic.Int64
	slowPeers         atomic.Int64
	duplicateBytes    atomic.Int64
	holdingsDropped   atomic.Int64
	strayTurnsGiven   atomic.Int64
	promBytes         *prometheus.CounterVec
	promChunks        *prometheus.CounterVec
	promOriginReqs    prometheus.Counter
	promUnscheduled   prometheus.Counter
	promOriginFetched prometheus.Counter
	promFailures      prometheus.Counter
	promBadPeers      prometheus.Counter
	promHedges        prometheus.Counter
	promSlowPeers     prometheus.Counter
	promDropped       prometheus.Counter
	promStrayTurns    prometheus.Counter
}

var sourceNames = [3]string{SourceCache, SourcePeer, SourceOrigin}

func sourceIndex(s string) int {
	for i, n := range sourceNames {
		if n == s {
			return i
		}
	}
	return 0
}

// NewMetrics returns counters registered with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		promBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "damselfly_peer_chunk_bytes_total",
			Help: "Stored chunk bytes delivered to readers, by source (cache, peer, origin).",
		}, []string{"source"}),
		promChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "damselfly_peer_chunks_total",
			Help: "Chunks delivered to readers, by source (cache, peer, origin).",
		}, []string{"source"}),
		promOriginReqs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_origin_requests_total",
			Help: "Ranged GETs sent to the origin registry.",
		}),
		promUnscheduled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_origin_requests_unscheduled_total",
			Help: "Ranged GETs started to the origin registry without a turn from the scheduler (it did not answer, or the parents it and recent answers named failed): outside its bound on fetchers per chunk.",
		}),
		promOriginFetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_origin_bytes_total",
			Help: "Bytes received from the origin registry.",
		}),
		promFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_read_failures_total",
			Help: "Chunk reads that failed.",
		}),
		promBadPeers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_bad_peer_reports_total",
			Help: "Peers reported for sending bad bytes or breaking the protocol.",
		}),
		promHedges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_hedged_requests_total",
			Help: "Requests to a parent that delivered nothing for hedge_delay, asked for a second time.",
		}),
		promSlowPeers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_slow_peer_cutoffs_total",
			Help: "Parents cut off for making no progress within parent_timeout.",
		}),
		promDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_holdings_dropped_total",
			Help: "Chunks this peer had announced and found gone from its cache (evicted), whose drop it sent to the scheduler.",
		}),
		promStrayTurns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_peer_stray_origin_turns_total",
			Help: "Origin turns granted for chunks that had arrived another way (or failed) by the time the answer came, given back at once.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.promBytes, m.promChunks, m.promOriginReqs, m.promUnscheduled,
			m.promOriginFetched, m.promFailures, m.promBadPeers, m.promHedges, m.promSlowPeers, m.promDropped, m.promStrayTurns} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Delivered counts a chunk of n stored bytes delivered from source.
func (m *Metrics) Delivered(source string, n int) {
	i := sourceIndex(source)
	m.bytes[i].Add(int64(n))
	m.chunks[i].Add(1)
	m.promBytes.WithLabelValues(source).Add(float64(n))
	m.promChunks.WithLabelValues(source).Inc()
}

// PeerRead counts n stored bytes fetched from a peer outside the engine
// (a live plain pull's pieces, package plain, which the engine then
// delivers from the cache).
func (m *Metrics) PeerRead(n int) { m.livePeer.Add(int64(n)) }

// OriginRead counts a ranged GET to the origin that returned n bytes,
// made outside the engine (a live plain pull's pieces, package plain).
func (m *Metrics) OriginRead(n int) { m.originRequest(n) }

func (m *Metrics) originRequest(n int) {
	m.originRequests.Add(1)
	m.originFetched.Add(int64(n))
	m.promOriginReqs.Inc()
	m.promOriginFetched.Add(float64(n))
}

func (m *Metrics) unscheduledOrigin() {
	m.unscheduled.Add(1)
	m.promUnscheduled.Inc()
}

func (m *Metrics) failure() {
	m.failures.Add(1)
	m.promFailures.Inc()
}

// BadPeer counts a peer reported for bad bytes.
func (m *Metrics) BadPeer() {
	m.badPeers.Add(1)
	m.promBadPeers.Inc()
}

func (m *Metrics) hedge() {
	m.hedges.Add(1)
	m.promHedges.Inc()
}

func (m *Metrics) slowPeer() {
	m.slowPeers.Add(1)
	m.promSlowPeers.Inc()
}

func (m *Metrics) duplicate(n int) { m.duplicateBytes.Add(int64(n)) }

// Dropped counts n held chunks found gone and dropped.
func (m *Metrics) Dropped(n int) {
	m.holdingsDropped.Add(int64(n))
	m.promDropped.Add(float64(n))
}

func (m *Metrics) strayTurns(n int) {
	m.strayTurnsGiven.Add(int64(n))
	m.promStrayTurns.Add(float64(n))
}

// Stats returns the counters.
func (m *Metrics) Stats() Stats {
	return Stats{
		CacheBytes: m.bytes[0].Load(), PeerBytes: m.bytes[1].Load(), OriginBytes: m.bytes[2].Load(),
		CacheChunks: m.chunks[0].Load(), PeerChunks: m.chunks[1].Load(), OriginChunks: m.chunks[2].Load(),
		OriginRequests:    m.originRequests.Load(),
		LivePeerBytes:     m.livePeer.Load(),
		OriginFetched:     m.originFetched.Load(),
		UnscheduledOrigin: m.unscheduled.Load(),
		Failures:          m.failures.Load(),
		BadPeers:          m.badPeers.Load(),
		Collapsed:         m.collapsed.Load(),
		Hedges:            m.hedges.Load(),
		SlowPeers:         m.slowPeers.Load(),
		DuplicateBytes:    m.duplicateBytes.Load(),
		HoldingsDropped:   m.holdingsDropped.Load(),
		StrayTurns:        m.strayTurnsGiven.Load(),
		ClaimHandovers:    m.claimHandovers.Load(),
	}
}
