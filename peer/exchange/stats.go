package exchange

import "sync/atomic"

// Stats counts a Server's work since it started.
type Stats struct {
	Streams        uint64 // requests read and answered (wholly or not)
	Busy           uint64 // streams refused with StatusBusy
	BadRequests    uint64 // requests refused with StatusBadRequest
	Aborted        uint64 // streams reset: timeout, stalled or vanished requester, Close
	ChunksSent     uint64
	ChunksNotFound uint64
	ChunkErrors    uint64 // Store read errors
	Corrupt        uint64 // entries that failed verification (and were dropped)
	BytesSent      uint64 // stored bytes sent
	Active         int    // streams being served now
}

type counters struct {
	streams, busy, badRequests, aborted, chunksSent, notFound, chunkErrors, corrupt, bytesSent atomic.Uint64
}

// Stats returns the server's counters. It is safe for concurrent use.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	active := len(s.active)
	s.mu.Unlock()
	return Stats{
		Streams:        s.n.streams.Load(),
		Busy:           s.n.busy.Load(),
		BadRequests:    s.n.badRequests.Load(),
		Aborted:        s.n.aborted.Load(),
		ChunksSent:     s.n.chunksSent.Load(),
		ChunksNotFound: s.n.notFound.Load(),
		ChunkErrors:    s.n.chunkErrors.Load(),
		Corrupt:        s.n.corrupt.Load(),
		BytesSent:      s.n.bytesSent.Load(),
		Active:         active,
	}
}
