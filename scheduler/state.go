package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"damselfly/rafs"
)

// State is the scheduler's whole soft state: members, holdings, origin
// fetches in flight, outstanding assignments, feedback and bans. It does
// no I/O, starts no goroutines and reads no clock: every method takes the
// time from its caller, and the only randomness comes from the source
// given to New, so the same calls give the same answers.
//
// A State is safe for concurrent use. A read-write mutex, mu, guards it,
// and a second one, rec, lets Parents and Report record what they do
// without the write lock: Parents searches under mu's read lock, so
// queries run in parallel, and records its assignments, origin turns
// and tree waits holding rec as well, as Report records an outcome
// (except one that changes holdings or accuses). So what they record
// (leases, pending counts and feedback, origin fetches, tree waits) is
// read and written holding rec under the read lock, or under the write
// lock; the scores derived from it, which the search reads without rec,
// are atomic (peerHot); and a blob is added to or dropped from s.blobs
// only under the write lock (forgetIfEmpty). Every other change takes
// the write lock. Methods that act for a peer take that peer's ID as
// the transport authenticated it, and change only what that peer may
// speak for.
type State struct {
	mu  sync.RWMutex
	rec sync.Mutex // see above; taken with mu read-locked, never alone
	// Under rec: whether the read lock is all that is held (so s.blobs
	// must not change), and the blobs found empty meanwhile, to forget
	// under the write lock.
	shared  bool
	emptied []*blobState

	cfg     Config
	seed    uint64        // from the injected source; see jitter
	queries atomic.Uint64 // numbers queries' jitter streams
	scratch sync.Pool     // of *scratch

	peers     map[string]*peer
	bySlot    []*peer   // members by slot; nil for a free slot
	hot       []peerHot // by slot
	freeSlots []int32
	blobs     map[rafs.Digest]*blobState
	// Kept by peer ID, so they outlive a peer's session: leaving and
	// joining again neither lifts a ban nor refills accusations.
	bans      map[string]*ban
	accused   map[string][]accusation
	reporters map[string]*reporter
	labels    map[string]*label
	nextLabel int32
	sources   map[string]int // members by PeerInfo.source()
	nextLease uint64         // numbers leases; see blobState.leased

	// holdingBytes is the sum of the members' peer.holdingBytes, bounded
	// by Config.MaxHoldingBytes.
	holdingBytes int64
	// fullUntil: the last time Register found Config.MaxPeers members
	// and none expired, none could expire before this (Unix ns), so
	// Register does not look through them again until then.
	fullUntil int64

	// turnsRanOut counts origin turns that reached their deadline with
	// their peer still a member: each held the chunk's waiters up for
	// Config.OriginTimeout.
	turnsRanOut atomic.Uint64
}

// peer is one member. The struct lives as long as the peer's membership:
// registering again while a member keeps it (and its feedback record); a
// peer that left or expired and joins again is a new struct, starting
// from a clean record. (Accusations and bans are kept by ID instead, so
// leaving does not shake them off.)
type peer struct {
	slot   int32 // index in State.hot and State.bySlot
	id     string
	info   PeerInfo
	joined time.Time
	load   Load

	pending    int     // outstanding assignments to this peer as parent
	success    float64 // moving average of report outcomes, 1 = all OK
	throughput float64 // moving average of reported bytes/s; 0 = unknown
	reports    int

	holdings     map[*blobState]int32 // blob -> index in blob.holders
	holdingBytes int64
	fetching     int                         // origin fetch turns held
	fetchBytes   int64                       // their sizes, where queries gave them (origin.go)
	leases       []lease                     // as requester, oldest first
	waits        map[rafs.Digest][]chunkWait // as requester: first tree waits (waits.go)
	nwaits       int                         // in waits
	waitsFrom    int64                       // no wait in waits began before, Unix ns
	rep          *reporter
	refuted      map[rafs.Digest]*refutation // as parent: chunks found missing (refute.go)
	gone         bool
}

// peerHot is the part of a peer read for every candidate of every query,
// kept apart in one dense array (State.hot) so that a query reads 40
// bytes per candidate from a few contiguous pages instead of a scattered
// peer struct each. Times are Unix nanoseconds. q and pending change as
// assignments are recorded, while other queries search (see State), so
// they are atomic.
type peerHot struct {
	seen        int64         // last registration or heartbeat
	bannedUntil int64         // 0 if never banned
	q           atomic.Uint64 // bits of the quality (score.go), kept current by refresh
	pending     atomic.Int32  // outstanding assignments as parent (tree.go)
	zone        int32         // interned label values; 0 = unset
	rack        int32
	host        int32
}

// quality returns the quality refresh stored.
func (h *peerHot) quality() float64 { return math.Float64frombits(h.q.Load()) }

// hotOf returns p's hot part. p must be a member (not gone).
func (s *State) hotOf(p *peer) *peerHot { return &s.hot[p.slot] }

// banned reports whether member p is banned at now.
func (s *State) banned(p *peer, now time.Time) bool {
	return !p.gone && now.UnixNano() < s.hot[p.slot].bannedUntil
}

// setPending changes p's outstanding assignments by d.
func (s *State) setPending(p *peer, d int) {
	p.pending += d
	s.refresh(p)
}

// refresh recomputes p's quality after a change to what it depends on.
// Done at each change, under the write lock, so that queries only read
// it under the read lock.
func (s *State) refresh(p *peer) {
	if !p.gone {
		h := &s.hot[p.slot]
		h.q.Store(math.Float64bits(s.quality(p)))
		h.pending.Store(int32(min(p.pending, math.MaxInt32)))
	}
}

// addSlot gives p a slot.
func (s *State) addSlot(p *peer) {
	if n := len(s.freeSlots); n > 0 {
		p.slot = s.freeSlots[n-1]
		s.freeSlots = s.freeSlots[:n-1]
		s.bySlot[p.slot] = p
		s.hot[p.slot] = peerHot{}
		return
	}
	p.slot = int32(len(s.bySlot))
	s.bySlot = append(s.bySlot, p)
	s.hot = append(s.hot, peerHot{})
}

// freeSlot releases p's slot.
func (s *State) freeSlot(p *peer) {
	s.bySlot[p.slot] = nil
	s.hot[p.slot] = peerHot{}
	s.freeSlots = append(s.freeSlots, p.slot)
}

// blobState is what the scheduler knows about one blob.
type blobState struct {
	digest  rafs.Digest
	holders []holder
	slab    slab // the holders' bitsets
	origin  map[uint32]*originFetch
	// leased are the outstanding assignments of the blob's chunks:
	// their requesters are the chunks' future holders.
	leased leaseIndex
	// askers are the last two distinct peers that asked for the blob's
	// unheld chunks, and when: whether others want it too.
	askers [2]asker
}

type asker struct {
	p  *peer
	at time.Time
}

// asked notes that r asked for b's unheld chunks at now, and reports
// whether another live peer did within originInterest.
func (b *blobState) asked(r *peer, now time.Time) bool {
	other := false
	for _, a := range b.askers {
		if a.p != nil && a.p != r && !a.p.gone && now.Sub(a.at) < originInterest {
			other = true
		}
	}
	if b.askers[0].p == r {
		b.askers[0].at = now
	} else {
		b.askers[1] = b.askers[0]
		b.askers[0] = asker{p: r, at: now}
	}
	return other
}

// holder is one peer's holding of one blob; its bitset is the row
// slab.words[off:off+len]. 16 bytes, read for every holder of every query.
type holder struct {
	slot     int32 // the peer's
	n        int32 // members
	off, len int32
}

// holdingOverhead approximates the bytes a holding costs beyond its
// bitset words; it counts against Config.MaxHoldingBytesPerPeer and
// Config.MaxHoldingBytes so that many tiny holdings are bounded too. It
// is what a holding of a blob nobody else holds costs, the blob's state
// included (measured: 424 bytes of heap per one-chunk blob announced by
// one peer), since that is what a peer announcing made-up digests makes
// the scheduler keep; holdings of shared blobs cost less.
const holdingOverhead = 512

// New returns an empty State. src seeds the tie-breaking jitter; nil
// means a fixed seed, which suits tests. The daemon passes a seeded
// source so that schedulers do not all break ties the same way.
func New(cfg Config, src rand.Source) (*State, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		src = rand.NewPCG(1, 2)
	}
	return &State{
		cfg:       cfg,
		seed:      src.Uint64(),
		peers:     map[string]*peer{},
		blobs:     map[rafs.Digest]*blobState{},
		bans:      map[string]*ban{},
		accused:   map[string][]accusation{},
		reporters: map[string]*reporter{},
		labels:    map[string]*label{},
		sources:   map[string]int{},
		scratch:   sync.Pool{New: newScratch},
	}, nil
}

// Config returns the configuration the State was made with.
func (s *State) Config() Config { return s.cfg }

// alive reports whether p's last registration or heartbeat is within the
// TTL at now.
func (s *State) alive(p *peer, now time.Time) bool {
	return now.UnixNano()-s.hot[p.slot].seen <= s.cfg.PeerTTL.Nanoseconds()
}

// member returns the live peer id, removing it first if its TTL ran out,
// so that no call acts for a peer Expire has not yet swept.
func (s *State) member(id string, now time.Time) (*peer, error) {
	p := s.peers[id]
	if p == nil {
		return nil, fmt.Errorf("peer %q: %w", id, ErrUnknownPeer)
	}
	if !s.alive(p, now) {
		s.removePeer(p)
		return nil, fmt.Errorf("peer %q: expired: %w", id, ErrUnknownPeer)
	}
	return p, nil
}

// blob returns the state of d, creating it if create is set.
func (s *State) blob(d rafs.Digest, create bool) *blobState {
	b := s.blobs[d]
	if b == nil && create {
		b = &blobState{digest: d}
		s.blobs[d] = b
	}
	return b
}

// forgetIfEmpty drops b once nothing refers to it. Recording under the
// read lock (s.shared), it notes b in s.emptied instead, for
// forgetEmptied.
func (s *State) forgetIfEmpty(b *blobState) {
	if len(b.holders) == 0 && len(b.origin) == 0 && b.leased.len() == 0 {
		if s.shared {
			s.emptied = append(s.emptied, b)
			return
		}
		delete(s.blobs, b.digest)
	}
}

// share marks the start (on) or end of recording under the read lock,
// holding rec. Ending, it returns the blobs found empty meanwhile.
func (s *State) share(on bool) []*blobState {
	s.shared = on
	if on {
		return nil
	}
	e := s.emptied
	s.emptied = nil
	return e
}

// forgetEmptied takes the write lock to drop the blobs of bs that are
// still empty, once recording under the read lock is over.
func (s *State) forgetEmptied(bs []*blobState) {
	if len(bs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range bs {
		if s.blobs[b.digest] == b {
			s.forgetIfEmpty(b)
		}
	}
}

// label is an interned label value, counted so that values of departed
// peers are forgotten.
type label struct {
	id   int32
	refs int
}

// intern maps a label value to a small integer, so that locality is three
// integer compares per candidate; "" is 0, meaning unset.
func (s *State) intern(v string) int32 {
	if v == "" {
		return 0
	}
	l := s.labels[v]
	if l == nil {
		s.nextLabel++
		l = &label{id: s.nextLabel}
		s.labels[v] = l
	}
	l.refs++
	return l.id
}

// release undoes one intern of v.
func (s *State) release(v string) {
	if l := s.labels[v]; l != nil {
		if l.refs--; l.refs <= 0 {
			delete(s.labels, v)
		}
	}
}
