package scheduler

import (
	"fmt"
	"math"
	"slices"
	"time"

	"damselfly/rafs"
)

// originFetch is one chunk nobody holds, and the peers whose turn it is
// to fetch it from origin. At most Config.OriginFetchers hold a turn at
// once; a turn ends when anyone announces the chunk, when its holder
// gives it up (AbandonOrigin) or leaves, or at its deadline, after which
// the next peer to ask gets it. So origin sees about one request per
// chunk however many peers want it, and a fetcher that died or stalled
// holds the others up by at most Config.OriginTimeout.
type originFetch struct {
	turns   []fetchTurn
	waiters []string // peers told to wait, to wake when the chunk arrives
	// deferred is the first peer refused the turn for holding
	// Config.OriginTurnsPerPeer already, and when: if nobody else has
	// taken the turn when it asks again originDefer later, it is its.
	deferred   *peer
	deferredAt time.Time
}

type fetchTurn struct {
	p        *peer
	deadline time.Time
	bytes    uint32 // the chunk's size as the query gave it (turnSize), 0 if not
}

// minTurnBytes is the least a sized turn counts for against
// Config.OriginTurnBytesPerPeer, so that a query claiming tiny chunks
// does not lift the count bound by much: 1024 turns at most in 4 MiB.
const minTurnBytes = 4 << 10

// turnSize is what one turn for a chunk of a query for n chunks of
// bytes stored bytes in all counts for: their mean, from minTurnBytes;
// 0 when the query gave no size.
func turnSize(bytes uint64, n int) uint32 {
	if bytes == 0 || n == 0 {
		return 0
	}
	return uint32(min(max(bytes/uint64(n), minTurnBytes), math.MaxUint32))
}

// take gives t's turn to its peer; drop takes it back.
func (t fetchTurn) take() { t.p.fetching++; t.p.fetchBytes += int64(t.bytes) }
func (t fetchTurn) drop() { t.p.fetching--; t.p.fetchBytes -= int64(t.bytes) }

// atTurnBound reports whether r holds as many origin turns as it may
// while other peers want the same blob, asking for a turn of size
// (turnSize): Config.OriginTurnsPerPeer, or more while they add up to
// less than Config.OriginTurnBytesPerPeer and the query gave sizes.
func (s *State) atTurnBound(r *peer, size uint32) bool {
	if r.fetching < s.cfg.OriginTurnsPerPeer {
		return false
	}
	return size == 0 || r.fetchBytes >= s.cfg.OriginTurnBytesPerPeer
}

// prune ends f's turns that ran out or whose peer left or was banned.
func (s *State) prune(f *originFetch, now time.Time) {
	f.turns = slices.DeleteFunc(f.turns, func(t fetchTurn) bool {
		if t.p.gone || !now.Before(t.deadline) || s.banned(t.p, now) {
			if !t.p.gone && !now.Before(t.deadline) {
				s.turnsRanOut.Add(1)
			}
			t.drop()
			return true
		}
		return false
	})
}

const (
	// originInterest is how recently another peer must have asked for a
	// blob's unheld chunks for Config.OriginTurnsPerPeer to apply.
	originInterest = 5 * time.Second
	// originDefer is the RetryAfter of a chunk whose turn r was refused
	// for holding enough turns while nobody holds one: the next peer to
	// ask takes it, or r on asking again once its own turns are done.
	originDefer = 100 * time.Millisecond
)

// originTurn decides who fetches unheld chunk c of b for requester r:
// r itself (true), or the peers holding turns, whom r waits for (false).
// With capped, r takes no new turn while it is at its bound
// (atTurnBound, for turns of size); it then waits for whoever takes the turn,
// but only for originDefer: a turn nobody took meanwhile is r's when it
// asks again. Peers reading the same chunks in the same order ask within
// that time and share the first copies; a peer whose chunks nobody else
// wants (random reads of a shared blob) loses one originDefer on them,
// not a round of its own turns per Config.OriginTurnsPerPeer chunks.
func (s *State) originTurn(b *blobState, r *peer, c uint32, now time.Time, capped bool, size uint32) (*originFetch, bool) {
	if b.origin == nil {
		b.origin = map[uint32]*originFetch{}
	}
	f := b.origin[c]
	if f == nil {
		f = &originFetch{}
		b.origin[c] = f
	}
	s.prune(f, now)
	for _, t := range f.turns {
		if t.p == r {
			return f, true
		}
	}
	refuse := capped && len(f.turns) == 0 && s.atTurnBound(r, size)
	if refuse && f.deferred == r && now.Sub(f.deferredAt) >= originDefer {
		refuse = false // nobody else wanted it meanwhile
	}
	if len(f.turns) < s.cfg.OriginFetchers && !refuse {
		t := fetchTurn{p: r, deadline: now.Add(s.cfg.OriginTimeout), bytes: size}
		t.take()
		f.turns = append(f.turns, t)
		f.deferred = nil
		if i := slices.Index(f.waiters, r.id); i >= 0 {
			f.waiters = slices.Delete(f.waiters, i, i+1)
		}
		return f, true
	}
	if refuse && (f.deferred == nil || f.deferred.gone) {
		f.deferred, f.deferredAt = r, now
	}
	if len(f.waiters) < s.cfg.MaxWaiters && !slices.Contains(f.waiters, r.id) {
		f.waiters = append(f.waiters, r.id)
	}
	return f, false
}

// retryAfter is how long a waiter for f should wait before asking again:
// until the earliest turn ends, at most Config.WaitRetry.
func (s *State) retryAfter(f *originFetch, now time.Time) time.Duration {
	if len(f.turns) == 0 {
		return originDefer
	}
	d := s.cfg.WaitRetry
	for _, t := range f.turns {
		d = min(d, t.deadline.Sub(now))
	}
	return max(d, 0)
}

// resolveOrigin ends the origin fetches of b that announcer's new chunks
// (listed, or set in full) satisfy, and returns their waiters.
func (s *State) resolveOrigin(b *blobState, announcer *peer, chunks []uint32, full Bitset) []string {
	if len(b.origin) == 0 {
		return nil
	}
	var woken []string
	end := func(c uint32, f *originFetch) {
		for _, t := range f.turns {
			t.drop()
		}
		woken = append(woken, f.waiters...)
		delete(b.origin, c)
	}
	if full != nil {
		for c, f := range b.origin {
			if full.Has(c) {
				end(c, f)
			}
		}
	} else {
		for _, c := range chunks {
			if f := b.origin[c]; f != nil {
				end(c, f)
			}
		}
	}
	return wakeList(woken, announcer.id)
}

// wakeList sorts and dedupes ids, leaving out self.
func wakeList(ids []string, self string) []string {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if i, ok := slices.BinarySearch(ids, self); ok {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// AbandonOrigin gives up peerID's turns to fetch chunks of blob from
// origin (the fetch failed), so that the next peer to ask gets the turn
// at once instead of at the deadline. It returns the peers that were
// waiting for those chunks, to be told to ask again.
func (s *State) AbandonOrigin(peerID string, blob rafs.Digest, chunks []uint32, now time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.member(peerID, now)
	if err != nil {
		return nil, fmt.Errorf("abandon origin fetch of %s: %w", blob, err)
	}
	b := s.blobs[blob]
	if b == nil {
		return nil, nil
	}
	woken := s.endTurns(p, b, chunks)
	s.forgetIfEmpty(b)
	return woken, nil
}

// endTurns ends p's origin turns for chunks of b and returns the peers
// that were waiting for them (sorted, without p). Write lock.
func (s *State) endTurns(p *peer, b *blobState, chunks []uint32) []string {
	if p.fetching == 0 || len(b.origin) == 0 {
		return nil
	}
	var woken []string
	for _, c := range chunks {
		f := b.origin[c]
		if f == nil {
			continue
		}
		i := slices.IndexFunc(f.turns, func(t fetchTurn) bool { return t.p == p })
		if i < 0 {
			continue
		}
		f.turns[i].drop()
		f.turns = slices.Delete(f.turns, i, i+1)
		woken = append(woken, f.waiters...)
		f.waiters = f.waiters[:0]
		if len(f.turns) == 0 {
			delete(b.origin, c)
		}
	}
	return wakeList(woken, p.id)
}

// dropFetches ends every origin fetch turn p holds.
func (s *State) dropFetches(p *peer) {
	if p.fetching == 0 {
		return
	}
	for _, b := range s.blobs {
		for c, f := range b.origin {
			f.turns = slices.DeleteFunc(f.turns, func(t fetchTurn) bool { return t.p == p })
			if len(f.turns) == 0 {
				delete(b.origin, c)
			}
		}
		s.forgetIfEmpty(b)
	}
	p.fetching, p.fetchBytes = 0, 0
}

// sweepOrigin ends turns that ran out and forgets fetches nobody holds a
// turn for; their waiters ask again at their retry time.
func (s *State) sweepOrigin(now time.Time) {
	for _, b := range s.blobs {
		for c, f := range b.origin {
			s.prune(f, now)
			if len(f.turns) == 0 {
				delete(b.origin, c)
			}
		}
		s.forgetIfEmpty(b)
	}
}
