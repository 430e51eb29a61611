package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"damselfly/scheduler"
)

// metrics are the daemon's Prometheus metrics, on the registry served at
// /metrics (with Go runtime, process and the host's libp2p metrics).
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	routeChunks  *prometheus.CounterVec
	routeSeconds prometheus.Histogram
	held         *prometheus.CounterVec
	undelivered  prometheus.Counter
	expired      prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, state *scheduler.State, held, sessions func() int) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "damselfly_scheduler_requests_total",
			Help: "Requests served, by message type and result (ok or an error code).",
		}, []string{"type", "result"}),
		routeChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "damselfly_scheduler_route_chunks_total",
			Help: "Chunks routed, by outcome: parent (a peer holds it), origin (the requester's turn), wait.",
		}, []string{"outcome"}),
		routeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "damselfly_scheduler_route_seconds",
			Help:    "Time to compute a route answer.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10),
		}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "damselfly_scheduler_routes_held_total",
			Help: "Route-waits held because their answer was all waits, by how the hold ended: fired (a watched chunk was announced or given up), timeout, shutdown.",
		}, []string{"end"}),
		undelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_scheduler_undelivered_origin_turns_total",
			Help: "Origin turns given back at once because the route answer granting them could not be sent (the peer had gone).",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "damselfly_scheduler_expired_peers_total",
			Help: "Peers dropped for missing heartbeats.",
		}),
	}
	gauge := func(name, help string, f func(scheduler.Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "damselfly_scheduler_" + name, Help: help},
			func() float64 { return float64(f(state.Stats())) })
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.routeChunks, m.routeSeconds, m.held, m.undelivered, m.expired,
		gauge("peers", "Registered peers.", func(s scheduler.Stats) int { return s.Peers }),
		gauge("blobs", "Blobs anyone holds or fetches.", func(s scheduler.Stats) int { return s.Blobs }),
		gauge("holdings", "(peer, blob) holdings.", func(s scheduler.Stats) int { return s.Holdings }),
		gauge("origin_fetches", "Chunks being fetched from origin.", func(s scheduler.Stats) int { return s.OriginFetches }),
		gauge("bans", "Peers banned.", func(s scheduler.Stats) int { return s.Bans }),
		gauge("leases", "Assignments not yet reported on or timed out.", func(s scheduler.Stats) int { return s.Leases }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "damselfly_scheduler_held_routes", Help: "Route-waits held now."},
			func() float64 { return float64(held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "damselfly_scheduler_sessions", Help: "Session streams open now that may carry more than one request (idle or not)."},
			func() float64 { return float64(sessions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "damselfly_scheduler_origin_turns_ran_out_total",
			Help: "Origin turns that reached origin_timeout undelivered while their peer stayed a member; the chunk's waiters waited that long.",
		}, func() float64 { return float64(state.OriginTurnsRanOut()) }),
	)
	return m
}
