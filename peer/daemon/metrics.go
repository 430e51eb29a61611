package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"damselfly/peer/exchange"
)

// exchangeCollector exports what the chunk exchange has served other
// peers: what a node uploads, and how often it turned requesters away.
type exchangeCollector struct {
	s     *exchange.Server
	descs map[string]*prometheus.Desc
}

var exchangeMetrics = []struct {
	name, help string
	gauge      bool
	value      func(exchange.Stats) float64
}{
	{"damselfly_exchange_streams_total", "Chunk requests from other peers read and answered.", false, func(s exchange.Stats) float64 { return float64(s.Streams) }},
	{"damselfly_exchange_busy_total", "Chunk requests refused as busy (per-peer or total stream limits).", false, func(s exchange.Stats) float64 { return float64(s.Busy) }},
	{"damselfly_exchange_bad_requests_total", "Chunk requests refused as malformed.", false, func(s exchange.Stats) float64 { return float64(s.BadRequests) }},
	{"damselfly_exchange_aborted_total", "Chunk streams reset: timeouts, stalled or vanished requesters.", false, func(s exchange.Stats) float64 { return float64(s.Aborted) }},
	{"damselfly_exchange_chunks_sent_total", "Chunks served to other peers.", false, func(s exchange.Stats) float64 { return float64(s.ChunksSent) }},
	{"damselfly_exchange_chunks_not_found_total", "Chunks asked for that this node did not hold.", false, func(s exchange.Stats) float64 { return float64(s.ChunksNotFound) }},
	{"damselfly_exchange_chunk_errors_total", "Chunks that could not be read from the node cache.", false, func(s exchange.Stats) float64 { return float64(s.ChunkErrors) }},
	{"damselfly_exchange_corrupt_total", "Cache entries found corrupt while serving (dropped, not sent).", false, func(s exchange.Stats) float64 { return float64(s.Corrupt) }},
	{"damselfly_exchange_bytes_sent_total", "Stored chunk bytes uploaded to other peers.", false, func(s exchange.Stats) float64 { return float64(s.BytesSent) }},
	{"damselfly_exchange_active_streams", "Chunk streams being served now.", true, func(s exchange.Stats) float64 { return float64(s.Active) }},
}

func newExchangeCollector(s *exchange.Server) *exchangeCollector {
	c := &exchangeCollector{s: s, descs: map[string]*prometheus.Desc{}}
	for _, m := range exchangeMetrics {
		c.descs[m.name] = prometheus.NewDesc(m.name, m.help, nil, nil)
	}
	return c
}

func (c *exchangeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect takes one snapshot of the counters for every metric.
func (c *exchangeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, m := range exchangeMetrics {
		kind := prometheus.CounterValue
		if m.gauge {
			kind = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[m.name], kind, m.value(st))
	}
}
