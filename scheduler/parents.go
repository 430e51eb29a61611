package scheduler

import (
	"fmt"
	"slices"
	"time"

	"damselfly/rafs"
)

// Answer is where a requester gets the chunks it asked for. Every chunk
// asked for is in exactly one of Parents[i].Chunks, Origin, or
// Wait[i].Chunks. All chunk lists are ascending.
type Answer struct {
	// Parents serve the chunks held by peers, best first. Each chunk is
	// assigned to one parent; the subsets are disjoint.
	Parents []Parent
	// Origin are chunks nobody can serve and whose origin fetch is the
	// requester's turn: fetch them from the registry, then Announce them
	// (or AbandonOrigin on failure).
	Origin []uint32
	// Wait are chunks to ask about again after RetryAfter (or when the
	// daemon wakes the requester, see Announce).
	Wait []Wait
}

// Parent is a peer to fetch chunks from.
type Parent struct {
	ID     string
	Addrs  []string // shared with the State: do not modify
	Chunks []uint32
}

// Wait is a group of chunks to ask about again.
type Wait struct {
	Chunks []uint32
	// Fetchers are the peers fetching these chunks now, from origin or
	// from a parent whose children are at the cap (tree.go); the chunks
	// will be served by them. Empty means the chunks are held by peers
	// beyond Config.MaxParents: ask again, with RetryAfter 0, once the
	// parents named have served theirs.
	Fetchers   []string
	RetryAfter time.Duration
}

// Parents answers where requester should get chunks of blob: from up to
// Config.MaxParents peers that together hold as many of them as possible,
// from origin (its turn), or after waiting for another peer's origin
// fetch or for the peers already fetching them from a full parent
// (tree.go). The requester and banned, expired or avoided peers are never
// named. Every parent named gets the assignment counted as load, and the
// requester counts as a future holder of the chunks, until the requester
// reports on it (Report) or Config.LeaseTimeout passes.
//
// Parents are chosen greedily: the candidate with the largest
// remaining coverage × score (score.go) is named and its chunks assigned
// to it, and so on (see choose), first among parents below their cap of
// children, then, for the chunks only full parents hold and r need not
// wait for, among all. Chunks held only by candidates beyond MaxParents
// are to be asked about again; chunks no eligible peer holds go through
// origin coordination (origin.go). The candidates of a blob with more
// than Config.ParentSample holders are a sample (see candidates).
//
// chunks may be in any order and repeat; it must hold 1 to
// Config.MaxChunksPerQuery ordinals below Config.MaxChunksPerBlob, else
// ErrInvalid. The slices of the Answer belong to the caller, except
// Parent.Addrs.
func (s *State) Parents(requester string, blob rafs.Digest, chunks []uint32, now time.Time) (Answer, error) {
	return s.ParentsSized(requester, blob, chunks, 0, now)
}

// ParentsSized is Parents for chunks whose stored sizes add up to bytes
// (0: not known), which bounds the origin turns it gives in bytes as
// well as in chunks (Config.OriginTurnBytesPerPeer).
func (s *State) ParentsSized(requester string, blob rafs.Digest, chunks []uint32, bytes uint64, now time.Time) (Answer, error) {
	if len(chunks) == 0 || len(chunks) > s.cfg.MaxChunksPerQuery {
		return Answer{}, fmt.Errorf("parents for %s: %d chunks, want 1 to %d: %w", blob, len(chunks), s.cfg.MaxChunksPerQuery, ErrInvalid)
	}
	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)
	want := append(sc.want[:0], chunks...)
	if !slices.IsSorted(want) {
		slices.Sort(want)
	}
	want = slices.Compact(want)
	sc.want = want
	sc.turnSize = turnSize(bytes, len(chunks))
	if last := want[len(want)-1]; last >= s.cfg.MaxChunksPerBlob {
		return Answer{}, fmt.Errorf("parents for %s: chunk %d not below %d: %w", blob, last, s.cfg.MaxChunksPerBlob, ErrInvalid)
	}
	var q request
	q.reset(want, sc.rem)
	sc.rem = q.rem

	// Search under the read lock: holdings, scores and what is left.
	var ans Answer
	s.mu.RLock()
	r := s.peers[requester]
	if r == nil || !s.alive(r, now) {
		s.mu.RUnlock()
		return Answer{}, fmt.Errorf("parents for %s: peer %q: %w", blob, requester, ErrUnknownPeer)
	}
	sc.cands = sc.cands[:0] // not the last query's, if b is unknown
	sc.chosen = sc.chosen[:0]
	b := s.blobs[blob]
	if b == nil {
		// Nobody holds, fetches or was assigned any of blob: every
		// chunk goes to origin coordination, which records the blob,
		// under the write lock. What changed in between (a parent
		// left, a chunk was announced) is the same race as a change
		// just after the answer, which peers handle.
		s.mu.RUnlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.peers[requester] != r {
			return Answer{}, fmt.Errorf("parents for %s: peer %q left: %w", blob, requester, ErrUnknownPeer)
		}
		_, unheld := s.rest(sc, &q)
		s.record(&ans, sc, r, blob, nil, nil, unheld, Wait{}, now)
		return ans, nil
	}
	s.candidates(sc, b, r, &q, now)
	if sc.nonFull > 0 {
		s.choose(sc, &ans, r, &q, false, false)
	}

	// Leases, origin turns and waits, which concurrent queries record
	// too, are read and recorded under rec as well (see State). Queries
	// that record in between are the same race as queries a moment
	// apart.
	var tree Wait
	if q.left > 0 && sc.anyFull {
		s.rec.Lock()
		tree = s.treeWait(sc, b, r, &q, now)
		s.rec.Unlock()
		if len(tree.Chunks) > 0 && len(ans.Parents) > 0 {
			// Ask again once the parents named have served theirs:
			// the future holders may have these by then.
			tree.RetryAfter = 0
		}
		s.choose(sc, &ans, r, &q, true, true)
	}
	var later, unheld []uint32
	if q.left > 0 {
		later, unheld = s.rest(sc, &q)
	}
	s.rec.Lock()
	s.share(true)
	s.record(&ans, sc, r, blob, b, later, unheld, tree, now)
	emptied := s.share(false)
	s.rec.Unlock()
	s.mu.RUnlock()
	s.forgetEmptied(emptied)
	return ans, nil
}

// record records ans, found by a search for r on blob (b, nil if
// unknown): the parents' assignments, the origin turns for unheld, and
// the tree wait, and adds the waits for later and unheld to ans. Under
// rec (with the read lock and s.shared) or the write lock; only the
// latter may be given a nil b.
func (s *State) record(ans *Answer, sc *scratch, r *peer, blob rafs.Digest, b *blobState, later, unheld []uint32, tree Wait, now time.Time) {
	s.sweepLeases(r, now)
	for i, p := range ans.Parents {
		got := p.Chunks
		s.addLease(r, sc.chosen[i], b, got[0], got[len(got)-1], now)
	}
	if len(unheld) > 0 {
		if b == nil {
			b = s.blob(blob, true)
		}
		s.coordinate(ans, b, r, unheld, sc.turnSize, now)
		s.forgetIfEmpty(b)
	}
	if len(later) > 0 {
		ans.Wait = append(ans.Wait, Wait{Chunks: later})
	}
	if len(tree.Chunks) > 0 {
		ans.Wait = append(ans.Wait, tree)
	}
	if len(tree.Chunks) > 0 || len(r.waits) > 0 {
		s.noteWaits(r, blob, ans, tree.Chunks, now)
	}
}

// coordinate places chunks nobody may serve r: r's turn to fetch from
// origin, or a wait for the peers whose turn it is, grouped by them. A
// banned requester fetches from origin without taking a turn: it may
// read, but others must not wait for chunks it would not be heard
// announcing.
func (s *State) coordinate(ans *Answer, b *blobState, r *peer, chunks []uint32, size uint32, now time.Time) {
	if s.banned(r, now) {
		ans.Origin = append(ans.Origin, chunks...)
		return
	}
	type group struct {
		turns []fetchTurn
		w     Wait
	}
	var groups []group
	capped := b.asked(r, now) && s.cfg.OriginTurnsPerPeer > 0
	var own Bitset
	if i, ok := r.holdings[b]; ok {
		own = b.row(&b.holders[i])
	}
next:
	for _, c := range chunks {
		if own.Has(c) {
			// r is listed as holding c and asks for it all the same: its
			// drop of c has not come yet, or its announcement crossed
			// this query. Either way it takes no turn: the others would
			// wait for a fetch that may never come once its drop is in
			// (the soak's 30 s reads). It fetches c itself if it must.
			ans.Origin = append(ans.Origin, c)
			continue
		}
		f, mine := s.originTurn(b, r, c, now, capped, size)
		if mine {
			ans.Origin = append(ans.Origin, c)
			continue
		}
		retry := s.retryAfter(f, now)
		for i := range groups {
			g := &groups[i]
			if slices.EqualFunc(g.turns, f.turns, func(a, b fetchTurn) bool { return a.p == b.p }) {
				g.w.Chunks = append(g.w.Chunks, c)
				g.w.RetryAfter = min(g.w.RetryAfter, retry)
				continue next
			}
		}
		ids := make([]string, len(f.turns))
		for i, t := range f.turns {
			ids[i] = t.p.id
		}
		groups = append(groups, group{turns: slices.Clone(f.turns), w: Wait{Chunks: []uint32{c}, Fetchers: ids, RetryAfter: retry}})
	}
	for _, g := range groups {
		ans.Wait = append(ans.Wait, g.w)
	}
}
