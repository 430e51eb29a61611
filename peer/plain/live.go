package plain

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"damselfly/peer/exchange"
	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/cache"
	"damselfly/rafs/piece"
	"damselfly/rafs/registry"
	"damselfly/rafs/route"
	"damselfly/rafs/runs"
)

// A live pull is how nodes that pull one plain blob at the same moment
// share it before any of them has it whole. The blob is cut into pieces
// of PieceSize at fixed offsets, so every node knows the pieces from the
// blob's size alone (a HEAD at the origin). The pieces are scheduled like
// RAFS chunks under the blob's Key: the Router gives each piece's origin
// turn to one node, which fetches it with a ranged GET, names it by the
// sha256 of its bytes, caches it, and announces it at once; the others
// are told to wait, then named that node as the piece's parent. A node
// learns the digest of a piece it did not fetch from the partial table of
// the parent the Router names (exchange.FetchTable), and then reads the
// piece through the fetch engine, which checks the bytes against that
// digest, caches, holds and announces them, so a piece spreads down a
// tree as chunks do.
//
// Only the whole blob can be checked against the digest the manifest
// pins. The mirror (proxy servePieces) hashes the blob as it sends it and
// holds back the last piece until the hash matched; the live pull then
// settles: a blob that matched gets its complete table, kept and served
// as any checked table; one that did not is dropped whole (its pieces out
// of the cache and the holdings) and marked suspect, so that the next
// pull of it on this node goes to the origin, and the pieces it records
// there name the peers whose digests lied (avoided as bad peers).

// Bounds of live pulls.
const (
	maxLive     = 256 // live pulls on a node at once; more pass through
	maxSuspects = 256 // blobs whose live pull failed, awaiting the origin's word
	// routeRetry bounds the wait between rounds when the Router says to
	// wait and gives no time.
	routeRetry = 200 * time.Millisecond
	// tableRefresh is how soon the Router is asked again after a round
	// whose parents' tables did not know the pieces assigned yet.
	tableRefresh = 50 * time.Millisecond
)

// Origin is what a live pull needs of the origin registry: the blob's
// size before its bytes, and byte ranges (registry.Client is one).
type Origin interface {
	BlobSize(ctx context.Context, ref registry.Ref, blob rafs.Digest) (int64, error)
	ReadRange(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte) error
}

// live is one blob being pulled live on this node. t is the table handed
// to the mirror: its Digests stay zero (a table is a value); the digests
// learnt so far are in digests, guarded by mu.
type live struct {
	t *piece.Table

	mu      sync.Mutex
	digests []rafs.Digest // zero: not known yet
	from    []lpeer.ID    // who named each digest; "" for this node (the origin)
	turns   map[uint32]bool
	// busy are the pieces a resolve on this node is fetching; another
	// resolve that wants them waits for done rather than ask the Router
	// (which would give this node its own turn again) and fetch them twice.
	busy map[uint32]chan struct{}

	// stopScout ends the scout (scout.go); set by startLive. read is
	// when a read last went through the pull (Unix ns): the scout stops
	// when nobody has for scoutIdle.
	stopScout context.CancelFunc
	read      atomic.Int64
}

func newLive(blob rafs.Digest, size, pieceSize int64) *live {
	n := int((size + pieceSize - 1) / pieceSize)
	return &live{
		t:       &piece.Table{Blob: blob, Size: size, PieceSize: pieceSize, Digests: make([]rafs.Digest, n)},
		digests: make([]rafs.Digest, n),
		from:    make([]lpeer.ID, n),
		turns:   make(map[uint32]bool),
		busy:    make(map[uint32]chan struct{}),
	}
}

// claim marks the pieces of want that no resolve on this node is
// fetching as fetched by the caller, and returns them with a function
// that ends the claim, and a channel of a piece another resolve is
// fetching (nil if none).
func (lv *live) claim(want []uint32) (mine []uint32, release func(), other chan struct{}) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	done := make(chan struct{})
	for _, o := range want {
		if ch, ok := lv.busy[o]; ok {
			other = ch
			continue
		}
		lv.busy[o] = done
		mine = append(mine, o)
	}
	return mine, func() {
		lv.mu.Lock()
		for _, o := range mine {
			if lv.busy[o] == done {
				delete(lv.busy, o)
			}
		}
		lv.mu.Unlock()
		close(done)
	}, other
}

// partial is the table of what is known, as served to peers.
func (lv *live) partial() *piece.Table {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return &piece.Table{Blob: lv.t.Blob, Size: lv.t.Size, PieceSize: lv.t.PieceSize, Digests: append([]rafs.Digest(nil), lv.digests...)}
}

// unknown returns the pieces of [first, last) whose digests are not
// known.
func (lv *live) unknown(first, last int) []uint32 {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	var out []uint32
	for i := first; i < last; i++ {
		if lv.digests[i] == (rafs.Digest{}) {
			out = append(out, uint32(i))
		}
	}
	return out
}

// learn records the digests t knows that lv does not, as named by p, and
// reports how many it learnt. A table of another blob or shape teaches
// nothing.
// stored is the size of pieces ords, as route queries give it.
func (lv *live) stored(ords []uint32) uint64 {
	var n int64
	for _, o := range ords {
		off := int64(o) * lv.t.PieceSize
		n += max(min(lv.t.PieceSize, lv.t.Size-off), 0)
	}
	return uint64(n)
}

func (lv *live) learn(t *piece.Table, p lpeer.ID) int {
	if t.Blob != lv.t.Blob || t.Size != lv.t.Size || t.PieceSize != lv.t.PieceSize {
		return 0
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	n := 0
	for i, d := range t.Digests {
		if d != (rafs.Digest{}) && lv.digests[i] == (rafs.Digest{}) {
			lv.digests[i], lv.from[i] = d, p
			n++
		}
	}
	return n
}

// chunks returns pieces [first, last) as chunks with the digests known;
// the caller has made sure they all are.
func (lv *live) chunks(first, last int) []rafs.Chunk {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	out := make([]rafs.Chunk, 0, last-first)
	for i := first; i < last; i++ {
		c := lv.t.Chunk(i)
		c.Digest = lv.digests[i]
		out = append(out, c)
	}
	return out
}

// complete returns the table of every digest, or nil if one is unknown.
func (lv *live) complete() *piece.Table {
	t := lv.partial()
	if !t.Complete() {
		return nil
	}
	return t
}

// suspicion is what a failed live pull claimed, kept until the origin's
// copy of the blob names the liars.
type suspicion struct {
	digests []rafs.Digest
	from    []lpeer.ID
	at      time.Time
}

// startLive begins a live pull of blob, or joins the one in progress on
// this node. turn0 says the Router gave this node the origin turn for
// piece 0; known is a partial table from a peer (may be nil). It returns
// nil when a live pull cannot be made (no size from the origin, a blob
// too big for a table, too many at once): the blob then passes through.
func (s *Source) startLive(ctx context.Context, up registry.Ref, blob rafs.Digest, turn0 bool, known *piece.Table, from lpeer.ID) *live {
	if s.origin == nil {
		return nil
	}
	var size int64
	if known != nil {
		size = known.Size
	} else {
		n, err := s.origin.BlobSize(ctx, up, blob)
		if err != nil {
			s.log.Debug("plain blob: no size from the origin; passing through", "blob", blob, "err", err)
			return nil
		}
		size = n
	}
	if size < 1 || size > piece.MaxPieces*s.pieceSize {
		return nil
	}
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if lv := s.lives[blob]; lv != nil {
		if known != nil {
			lv.learn(known, from)
		}
		return lv
	}
	if len(s.lives) >= maxLive {
		return nil
	}
	pieceSize := s.pieceSize
	if known != nil {
		pieceSize = known.PieceSize
	}
	lv := newLive(blob, size, pieceSize)
	if turn0 {
		lv.turns[0] = true
	}
	if known != nil {
		lv.learn(known, from)
	}
	s.lives[blob] = lv
	// The scout lives as long as the live pull, not the request that
	// started it: other requests of this node join the pull.
	sctx, stop := context.WithTimeout(context.WithoutCancel(ctx), s.scoutLife(lv))
	lv.stopScout = stop
	go s.scout(sctx, up, lv)
	return lv
}

// liveOf returns the live pull of blob, if any.
func (s *Source) liveOf(blob rafs.Digest) *live {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	return s.lives[blob]
}

// liveFor returns the live pull whose table t is, if any.
func (s *Source) liveFor(t *piece.Table) *live {
	if lv := s.liveOf(t.Blob); lv != nil && lv.t == t {
		return lv
	}
	return nil
}

// endLive removes lv from the live pulls and stops its scout.
func (s *Source) endLive(lv *live) {
	lv.stopScout()
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.lives[lv.t.Blob] == lv {
		delete(s.lives, lv.t.Blob)
	}
}

// resolve learns the digests of pieces [first, last) of lv: pieces whose
// origin turn is this node's are fetched from the origin (fetchBlind);
// for pieces a parent holds, the parent's table is fetched; pieces others
// are fetching are asked about again after a pause. It ends when every
// digest is known, or with an error at ctx's end or the fetch deadline.
func (s *Source) resolve(ctx context.Context, up registry.Ref, lv *live, first, last int) error {
	deadline := time.Now().Add(s.deadline)
	for {
		want := lv.unknown(first, last)
		if len(want) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("plain blob %s: %d pieces unknown after %s", lv.t.Blob, len(want), s.deadline)
		}
		want, release, other := lv.claim(want)
		if len(want) == 0 {
			release()
			select { // another resolve here is fetching them all
			case <-ctx.Done():
				return ctx.Err()
			case <-other:
			}
			continue
		}
		progress, pause, err := s.resolveRound(ctx, up, lv, want)
		release()
		if err != nil {
			return err
		}
		if progress {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// resolveRound asks the Router about pieces want of lv (the caller's to
// fetch) and fetches what it names: its origin turns, and the pieces
// parents hold. It reports whether any digest was learnt, and how long to
// pause before asking again if not.
func (s *Source) resolveRound(ctx context.Context, up registry.Ref, lv *live, want []uint32) (bool, time.Duration, error) {
	key := Key(lv.t.Blob)
	{
		var rt route.Route
		lv.mu.Lock()
		for _, o := range want {
			if lv.turns[o] {
				rt.Origin = append(rt.Origin, o)
				delete(lv.turns, o)
			}
		}
		lv.mu.Unlock()
		if len(rt.Origin) == 0 {
			var err error
			if rt, err = s.eng.Route(ctx, key, want, lv.stored); err != nil {
				// No scheduler answers: this node fetches what it
				// misses itself, as the engine does.
				rt = route.Route{Origin: want}
			}
		}
		progress := false
		if len(rt.Origin) > 0 {
			if err := s.fetchBlind(ctx, up, lv, rt.Origin); err != nil {
				return false, 0, err
			}
			progress = true
		}
		var shunned []uint32
		for _, p := range rt.Parents {
			if p.Info.ID == s.h.ID() || len(p.Chunks) == 0 {
				continue
			}
			if s.eng.Avoided(p.Info.ID) {
				// A peer this node caught lying or stalling: its pieces
				// come from the origin instead.
				shunned = append(shunned, p.Chunks...)
				continue
			}
			s.eng.Learn(key, p.Info, p.Chunks)
			s.learnFrom(ctx, lv, p.Info, p.Chunks)
			if s.fetchAssigned(ctx, up, lv, p) > 0 {
				progress = true
			}
		}
		if len(shunned) > 0 {
			if err := s.fetchBlind(ctx, up, lv, shunned); err != nil {
				return false, 0, err
			}
			progress = true
		}
		pause := routeRetry
		for _, w := range rt.Wait {
			if w.RetryAfter > 0 && w.RetryAfter < pause {
				pause = w.RetryAfter
			}
		}
		if len(rt.Wait) == 0 {
			pause = tableRefresh // parents whose tables did not know yet
		}
		return progress, pause, nil
	}
}

// learnFrom fetches p's table of lv's blob and learns its digests, when
// a piece of pieces (those the Router assigned to p, which p announced,
// so its table names them) is not known yet. A peer that sends a broken
// table is avoided.
func (s *Source) learnFrom(ctx context.Context, lv *live, p lpeer.AddrInfo, pieces []uint32) int {
	lv.mu.Lock()
	unknown := false
	for _, o := range pieces {
		if int(o) < len(lv.digests) && lv.digests[o] == (rafs.Digest{}) {
			unknown = true
			break
		}
	}
	lv.mu.Unlock()
	if !unknown {
		return 0
	}
	if len(p.Addrs) > 0 {
		s.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.TempAddrTTL)
	}
	t, err := exchange.FetchTable(ctx, s.h, p.ID, lv.t.Blob)
	if err != nil {
		if errors.Is(err, exchange.ErrProtocol) {
			s.eng.AvoidBad(p.ID)
			s.m.BadPeer()
			s.log.Warn("peer sent a broken piece table; avoiding it", "peer", p.ID, "blob", lv.t.Blob, "err", err)
		}
		return 0
	}
	return lv.learn(t, p.ID)
}

// fetchAssigned fetches the pieces the Router assigned to parent p whose
// digests are known from p, each checked against its digest, then caches,
// holds and announces them, and reports the assignment (which also frees
// p for others: an assignment left unreported keeps a parent full). It
// returns how many pieces arrived.
//
// The pieces are fetched as the engine's flights (fetch.Engine.Claim),
// keyed as a read of them by up would be: a read of one meanwhile waits
// for this fetch, and a piece a read is fetching already is not asked of
// p; pieces that do not come are fetched by the engine for the reads
// waiting on them.
func (s *Source) fetchAssigned(ctx context.Context, up registry.Ref, lv *live, p route.Parent) int {
	key := Key(lv.t.Blob)
	var cs []rafs.Chunk
	lv.mu.Lock()
	for _, o := range p.Chunks {
		if int(o) < len(lv.digests) && lv.digests[o] != (rafs.Digest{}) {
			c := lv.t.Chunk(int(o))
			c.Digest = lv.digests[o]
			cs = append(cs, c)
		}
	}
	lv.mu.Unlock()
	if len(cs) == 0 {
		// p's table named none of them (it could not be had): nothing
		// was asked of p, so there is nothing to report of it; the
		// assignment lapses at the scheduler.
		return 0
	}
	cl := s.eng.Claim(up, key, lv.t.Blob, cs)
	defer cl.Release()
	cs = cl.Chunks()
	if len(cs) == 0 {
		// Reads are fetching them all: nothing is asked of p, which
		// did nothing wrong. The assignment is reported done, with no
		// bytes, so that p does not count as loaded with it until the
		// scheduler's lease times out.
		if ctx.Err() == nil {
			s.router.Report(p.Info.ID, route.Outcome{Blob: key, OK: true})
		}
		return 0
	}
	asked := make(map[uint32]rafs.Chunk, len(cs))
	for _, c := range cs {
		asked[c.Ordinal] = c
	}
	start := time.Now()
	// The outcome is of the pieces asked for: a piece whose digest p's
	// table did not give was not asked for, and is not p's failure.
	o := route.Outcome{Blob: key, OK: true}
	var got []uint32
	for len(cs) > 0 && ctx.Err() == nil {
		n, bytes := 0, int64(0)
		for n < len(cs) && n < exchange.MaxChunksPerBatch && bytes+int64(cs[n].CompressedSize) <= exchange.MaxBatchBytes {
			bytes += int64(cs[n].CompressedSize)
			n++
		}
		batch := cs[:max(n, 1)]
		cs = cs[len(batch):]
		pctx, cancel := context.WithTimeout(ctx, s.parentTimeout)
		res, err := exchange.FetchWatched(pctx, s.h, p.Info.ID, key, batch, func(c rafs.Chunk, stored []byte) error {
			if err := s.cache.PutChunk(c, stored); err != nil {
				return err
			}
			s.hold.Hold(key, c.Ordinal, cache.SHA256(c.Digest))
			// Announced before the reads waiting on it go on, as the
			// engine's own fetches do.
			s.router.Announce(key, []uint32{c.Ordinal})
			got = append(got, c.Ordinal)
			// stored is ours (exchange.Fetch): Kept takes it.
			if a, ok := asked[c.Ordinal]; ok {
				cl.Kept(a, c, stored)
			} else {
				bufpool.Put(stored)
			}
			return nil
		}, func(int) { cl.Progress() })
		cancel()
		o.Bytes += res.Bytes
		for _, c := range res.Missing {
			o.Missing = append(o.Missing, c.Ordinal)
		}
		if err != nil || len(res.Missing) > 0 {
			o.OK = false
		}
		if err != nil {
			if errors.Is(err, exchange.ErrBadChunk) || errors.Is(err, exchange.ErrProtocol) {
				o.BadBytes = true
				if len(res.Bad) > 0 {
					o.BadChunk = res.Bad[0].Ordinal
				}
				s.m.BadPeer()
				s.log.Warn("peer sent bad pieces of a plain blob; avoiding it", "peer", p.Info.ID, "blob", lv.t.Blob, "err", err)
			}
			break
		}
	}
	o.Duration = time.Since(start)
	if ctx.Err() == nil {
		s.router.Report(p.Info.ID, o)
	}
	if o.BadBytes {
		s.eng.AvoidBad(p.Info.ID)
	}
	if len(got) > 0 {
		s.m.PeerRead(int(o.Bytes))
	}
	return len(got)
}

// fetchBlind fetches pieces ords of lv from the origin, adjacent ones in
// one ranged GET, names each by the sha256 of its bytes, caches and holds
// it, and announces them: the node's origin turns for them. Turns for
// pieces it could not fetch are given back.
func (s *Source) fetchBlind(ctx context.Context, up registry.Ref, lv *live, ords []uint32) error {
	key := Key(lv.t.Blob)
	cs := make([]rafs.Chunk, len(ords))
	for i, o := range ords {
		cs[i] = lv.t.Chunk(int(o))
	}
	done := map[uint32]bool{}
	defer func() {
		var left []uint32
		for _, o := range ords {
			if !done[o] {
				left = append(left, o)
			}
		}
		if len(left) > 0 {
			s.router.Abandon(key, left)
		}
	}()
	for _, run := range runs.Merge(cs, uint64(s.maxRange)) {
		buf := make([]byte, run.Len())
		if err := s.origin.ReadRange(ctx, up, lv.t.Blob, int64(run.Off), buf); err != nil {
			return fmt.Errorf("plain blob %s: pieces %d-%d from the origin: %w", lv.t.Blob, run.Chunks[0].Ordinal, run.Chunks[len(run.Chunks)-1].Ordinal, err)
		}
		var got []uint32
		for _, c := range run.Chunks {
			b := run.Stored(buf, c)
			c.Digest = rafs.Digest(sha256.Sum256(b))
			if err := s.cache.PutChunk(c, b); err != nil {
				return fmt.Errorf("plain blob %s: caching piece %d: %w", lv.t.Blob, c.Ordinal, err)
			}
			lv.mu.Lock()
			if lv.digests[c.Ordinal] == (rafs.Digest{}) || lv.from[c.Ordinal] != "" {
				lv.digests[c.Ordinal], lv.from[c.Ordinal] = c.Digest, ""
			}
			lv.mu.Unlock()
			s.hold.Hold(key, c.Ordinal, cache.SHA256(c.Digest))
			done[c.Ordinal] = true
			got = append(got, c.Ordinal)
		}
		s.router.Announce(key, got)
		s.m.OriginRead(len(buf))
	}
	return nil
}

// settleLive ends lv, whose whole blob matched its digest: its complete
// table is kept and served as any checked table.
func (s *Source) settleLive(lv *live) {
	s.endLive(lv)
	if t := lv.complete(); t != nil {
		s.tables.keep(t)
		return
	}
	s.failLive(lv, errors.New("digests unknown after the blob matched"))
}

// failLive ends lv after a read through it failed (why): its pieces are
// dropped from the cache and the holdings, and the blob is marked suspect,
// so that the next pull of it here goes to the origin, whose copy then
// names any peer whose digests lied (convict).
func (s *Source) failLive(lv *live, why error) {
	s.endLive(lv)
	t := lv.partial()
	var ords []uint32
	for i, d := range t.Digests {
		if d != (rafs.Digest{}) {
			_ = s.cache.Remove(cache.SHA256(d))
			ords = append(ords, uint32(i))
		}
	}
	s.hold.Unhold(Key(lv.t.Blob), ords)
	lv.mu.Lock()
	sus := &suspicion{digests: append([]rafs.Digest(nil), lv.digests...), from: append([]lpeer.ID(nil), lv.from...), at: time.Now()}
	lv.mu.Unlock()
	s.markSuspect(lv.t.Blob, sus)
	s.log.Warn("plain blob pulled live failed; dropped, and read from the origin next", "blob", lv.t.Blob, "err", why)
}

// markSuspect sends the next pull of blob on this node to the origin;
// sus, when not nil, is what a failed live pull was told, for convict.
func (s *Source) markSuspect(blob rafs.Digest, sus *suspicion) {
	if sus == nil {
		sus = &suspicion{at: time.Now()}
	}
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if len(s.suspects) >= maxSuspects {
		for b, o := range s.suspects {
			if time.Since(o.at) > time.Hour || len(s.suspects) >= maxSuspects {
				delete(s.suspects, b)
			}
		}
	}
	s.suspects[blob] = sus
}

// suspect reports whether blob's last live pull on this node failed.
func (s *Source) suspect(blob rafs.Digest) bool {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	_, ok := s.suspects[blob]
	return ok
}

// convict compares the table of blob, recorded from the origin, with
// what its failed live pull was told, and avoids each peer that named a
// digest the origin's bytes do not have.
func (s *Source) convict(t *piece.Table) {
	s.liveMu.Lock()
	sus := s.suspects[t.Blob]
	delete(s.suspects, t.Blob)
	s.liveMu.Unlock()
	if sus == nil || len(sus.digests) != t.Count() {
		return
	}
	liars := map[lpeer.ID]int{}
	for i, d := range sus.digests {
		if d != (rafs.Digest{}) && d != t.Digests[i] && sus.from[i] != "" {
			liars[sus.from[i]]++
		}
	}
	for p, n := range liars {
		s.eng.AvoidBad(p)
		s.m.BadPeer()
		s.log.Warn("peer named wrong digests for pieces of a plain blob; avoiding it", "peer", p, "blob", t.Blob, "pieces", n)
	}
}
