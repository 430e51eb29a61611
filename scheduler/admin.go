package scheduler

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"time"

	"damselfly/rafs"
)

// The admin view: copies of the state for the admin API and metrics.
// Every list is sorted, so the same state always reads the same.

// PeerView is one member as the scheduler sees it.
type PeerView struct {
	ID             string
	Addrs          []string
	Labels         map[string]string
	Source         string // the machine it registered from (PeerInfo.Source)
	UploadCapacity int64
	Load           Load
	Joined         time.Time
	LastSeen       time.Time
	Alive          bool      // within PeerTTL at the time asked
	Pending        int       // assignments not yet reported or timed out
	Success        float64   // moving average of outcomes, 1 = all OK
	Throughput     float64   // moving average, bytes/s; 0 = unknown
	Reports        int       // reports received about it
	Blobs          int       // blobs it holds chunks of
	Chunks         int64     // chunks it holds, over all blobs
	HoldingBytes   int64     // memory its holdings take, by the budget's count
	OriginTurns    int       // origin fetches it holds a turn for
	BannedUntil    time.Time // zero if not banned
}

// BlobView summarises the holdings of one blob.
type BlobView struct {
	Blob         rafs.Digest
	Holders      int   // peers holding any chunk
	Chunks       int   // distinct chunks held by anyone
	Copies       int64 // chunks held, counted once per holder
	OriginFetch  int   // chunks being fetched from origin
	OriginWaiter int   // peers waiting on those fetches
}

// OriginView is one chunk being fetched from origin.
type OriginView struct {
	Blob     rafs.Digest
	Chunk    uint32
	Fetchers []FetchTurnView
	Waiters  []string
}

// FetchTurnView is one peer's turn to fetch a chunk from origin.
type FetchTurnView struct {
	Peer     string
	Deadline time.Time
}

// BanView is one ban.
type BanView struct {
	Peer         string
	Since, Until time.Time
	Accusers     []string
}

// Stats are the counts exported as metrics.
type Stats struct {
	Peers, Blobs, Holdings, OriginFetches, Bans, Leases int
}

// Peers returns every member, by ID.
func (s *State) Peers(now time.Time) []PeerView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.rec.Lock() // for what Parents and Report record
	defer s.rec.Unlock()
	out := make([]PeerView, 0, len(s.peers))
	for _, p := range s.peers {
		v := PeerView{
			ID: p.id, Addrs: slices.Clone(p.info.Addrs), Labels: maps.Clone(p.info.Labels), Source: p.info.Source,
			UploadCapacity: p.info.UploadCapacity, Load: p.load, Joined: p.joined, LastSeen: time.Unix(0, s.hotOf(p).seen).UTC(),
			Alive: s.alive(p, now), Pending: p.pending, Success: p.success, Throughput: p.throughput,
			Reports: p.reports, Blobs: len(p.holdings), HoldingBytes: p.holdingBytes, OriginTurns: p.fetching,
		}
		if s.banned(p, now) {
			v.BannedUntil = time.Unix(0, s.hotOf(p).bannedUntil).UTC()
		}
		for b, i := range p.holdings {
			v.Chunks += int64(b.holders[i].n)
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b PeerView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Blobs summarises every blob anyone holds or fetches, by digest.
func (s *State) Blobs() []BlobView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.rec.Lock() // for what Parents and Report record
	defer s.rec.Unlock()
	out := make([]BlobView, 0, len(s.blobs))
	var union Bitset
	for _, b := range s.blobs {
		v := BlobView{Blob: b.digest, Holders: len(b.holders), OriginFetch: len(b.origin)}
		union = union[:0]
		for i := range b.holders {
			h := &b.holders[i]
			v.Copies += int64(h.n)
			row := b.row(h)
			if len(row) > len(union) {
				union = union.grow(len(row))
			}
			for i, w := range row {
				union[i] |= w
			}
		}
		v.Chunks = union.Count()
		for _, f := range b.origin {
			v.OriginWaiter += len(f.waiters)
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b BlobView) int { return bytes.Compare(a.Blob[:], b.Blob[:]) })
	return out
}

// OriginFetches lists the chunks being fetched from origin, by blob and
// chunk, leaving out turns that ran out at now.
func (s *State) OriginFetches(now time.Time) []OriginView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.rec.Lock() // for what Parents and Report record
	defer s.rec.Unlock()
	var out []OriginView
	for _, b := range s.blobs {
		for c, f := range b.origin {
			v := OriginView{Blob: b.digest, Chunk: c, Waiters: slices.Sorted(slices.Values(f.waiters))}
			for _, t := range f.turns {
				if now.Before(t.deadline) && !t.p.gone {
					v.Fetchers = append(v.Fetchers, FetchTurnView{Peer: t.p.id, Deadline: t.deadline})
				}
			}
			if len(v.Fetchers) > 0 {
				out = append(out, v)
			}
		}
	}
	slices.SortFunc(out, func(a, b OriginView) int {
		if c := bytes.Compare(a.Blob[:], b.Blob[:]); c != 0 {
			return c
		}
		return int(int64(a.Chunk) - int64(b.Chunk))
	})
	return out
}

// Bans lists the bans in force at now, by peer.
func (s *State) Bans(now time.Time) []BanView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []BanView
	for id, b := range s.bans {
		if now.Before(b.until) {
			out = append(out, BanView{Peer: id, Since: b.since, Until: b.until, Accusers: slices.Clone(b.accusers)})
		}
	}
	slices.SortFunc(out, func(a, b BanView) int { return strings.Compare(a.Peer, b.Peer) })
	return out
}

// OriginTurnsRanOut is how many origin turns have reached their deadline
// (Config.OriginTimeout) undelivered, their peer still a member, since
// the State was made. Each is a chunk its waiters waited that long for.
func (s *State) OriginTurnsRanOut() uint64 { return s.turnsRanOut.Load() }

// Stats returns the current counts.
func (s *State) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.rec.Lock() // for what Parents and Report record
	defer s.rec.Unlock()
	st := Stats{Peers: len(s.peers), Blobs: len(s.blobs), Bans: len(s.bans)}
	for _, b := range s.blobs {
		st.Holdings += len(b.holders)
		st.OriginFetches += len(b.origin)
	}
	for _, p := range s.peers {
		st.Leases += len(p.leases)
	}
	return st
}
