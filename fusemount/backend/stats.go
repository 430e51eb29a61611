package backend

import "sync/atomic"

// Source names where a read was served from. Its value is a short word
// fit for a metric label.
type Source string

// Sources.
const (
	SourceProxy    Source = "proxy"
	SourceRegistry Source = "registry"
	SourceOCI      Source = "oci"
)

func (s Source) String() string { return string(s) }

// SourceStats counts the requests of one source since New.
type SourceStats struct {
	Requests uint64 // attempts sent (for oci: reads)
	Bytes    uint64 // bytes delivered by successful attempts
	Errors   uint64 // failed attempts, of any kind
	Retries  uint64 // attempts that followed a failed one in the same read
}

// Stats is a snapshot of a Backend's counters, for metrics.
type Stats struct {
	Proxy, Registry, OCI SourceStats
	// ProxyHealthy is the proxy's current health; false without a proxy.
	ProxyHealthy bool
	// Fallbacks counts requests sent to the registry although a proxy is
	// configured (because it was unhealthy or could not serve the blob).
	Fallbacks uint64
}

type sourceCounters struct {
	requests, bytes, errors, retries atomic.Uint64
}

func (c *sourceCounters) snapshot() SourceStats {
	return SourceStats{
		Requests: c.requests.Load(),
		Bytes:    c.bytes.Load(),
		Errors:   c.errors.Load(),
		Retries:  c.retries.Load(),
	}
}

type counters struct {
	proxy, registry, oci sourceCounters
	fallbacks            atomic.Uint64
}

func (c *counters) of(s Source) *sourceCounters {
	switch s {
	case SourceProxy:
		return &c.proxy
	case SourceOCI:
		return &c.oci
	default:
		return &c.registry
	}
}
