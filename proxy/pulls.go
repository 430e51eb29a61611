package proxy

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// What served a mirror request (Pull.Served).
const (
	// ServedOrigin: passed through to the origin registry, which answered.
	ServedOrigin = "origin"
	// ServedNode: a blob from pieces through a table this node checked
	// (pieces from its cache, or from peers where it no longer holds them),
	// or, the origin being unreachable, a manifest by digest from the
	// node's manifest store.
	ServedNode = "node"
	// ServedNodeStale: the origin being unreachable, a manifest by tag
	// from the node's manifest store, through the tag's last resolution
	// (within Config.ManifestStale; the response carries HeaderStale).
	ServedNodeStale = "node-stale"
	// ServedPeers: a blob from pieces through a table from a peer, or,
	// the origin being unreachable, a manifest or tag resolution other
	// peers held (WithManifestPeers).
	ServedPeers = "peers"
	// ServedUnreachable: passed through, but the origin did not answer
	// (the client got 502 or 504 from the mirror).
	ServedUnreachable = "unreachable"
	// ServedRefused: the registry would not give the client the blob.
	ServedRefused = "refused"
	// ServedRejected: a request the mirror does not serve (bad name,
	// method, or no registry named).
	ServedRejected = "rejected"
)

// Pull is one mirror request, as the request log and the peer's status
// (Recent) see it.
type Pull struct {
	Time     time.Time     `json:"time"`
	Method   string        `json:"method"`
	Registry string        `json:"registry,omitempty"`
	Repo     string        `json:"repo,omitempty"`
	Kind     string        `json:"kind,omitempty"` // blobs, manifests, tags or referrers
	Ref      string        `json:"ref,omitempty"`  // the digest or tag
	Status   int           `json:"status"`
	Bytes    int64         `json:"bytes"` // body bytes sent to the client
	Served   string        `json:"served"`
	Duration time.Duration `json:"duration"`
}

// maxRecent bounds the pulls kept for Recent.
const maxRecent = 64

// recentPulls is a ring of the last maxRecent pulls. Safe for concurrent
// use.
type recentPulls struct {
	mu   sync.Mutex
	ring [maxRecent]Pull
	n    int // pulls recorded, ever
}

func (r *recentPulls) add(p Pull) {
	r.mu.Lock()
	r.ring[r.n%maxRecent] = p
	r.n++
	r.mu.Unlock()
}

// Recent returns the last mirror requests, newest first (at most 64).
func (s *Server) Recent() []Pull {
	r := &s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	k := min(r.n, maxRecent)
	out := make([]Pull, 0, k)
	for i := range k {
		out = append(out, r.ring[(r.n-1-i)%maxRecent])
	}
	return out
}

// finishPull completes p with what the response sent, keeps it for
// Recent and logs it (Config.LogRequests).
func (s *Server) finishPull(p *Pull, w *countingWriter) {
	p.Duration = time.Since(p.Time)
	p.Status, p.Bytes = w.code, w.n
	if p.Status == 0 {
		p.Status = http.StatusOK
	}
	if p.Served == "" {
		p.Served = ServedRejected
	}
	s.recent.add(*p)
	if !s.cfg.LogRequests {
		return
	}
	s.log.Info("mirror request", "method", p.Method, "registry", p.Registry, "repo", p.Repo, "kind", p.Kind, "ref", p.Ref,
		"status", p.Status, "bytes", p.Bytes, "served", p.Served, "took", p.Duration.Round(time.Millisecond))
}

// countingWriter records the status and body bytes of a mirror response.
// Unwrap lets http.ResponseController reach Flush and deadlines.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveStatus answers GET /status with the JSON of the status function.
func (s *Server) serveStatus(w http.ResponseWriter, _ *http.Request) {
	body, err := json.MarshalIndent(s.status(), "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(body, '\n'))
}
