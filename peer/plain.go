package peer

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"damselfly/peer/exchange"
	"damselfly/peer/fetch"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/piece"
	"damselfly/rafs/registry"
	"damselfly/rafs/route"
)

// Plain (non-RAFS) blobs pulled through the mirror travel between peers
// as pieces (package piece): raw chunks of the blob, ordinal = piece
// index, so ReadChunks fetches, verifies, caches and announces them like
// any chunk. What is particular to plain blobs is the piece table: this
// file keeps the tables the node has verified (and serves them to
// peers), fetches a table from a holder, records the pieces of a blob
// streaming from the origin, and settles a read through a table from a
// peer once the whole blob has been checked.

// Pieces are named for the scheduler, the holdings and the chunk exchange
// by the blob's plain key, not its digest, so that piece ordinals never
// mix with the chunk ordinals of a RAFS blob with the same digest (a RAFS
// blob can be pulled through the mirror too). The origin is asked for the
// blob itself (fetch.Engine.ReadPieces takes both names).
func plainKey(blob rafs.Digest) rafs.Digest {
	h := sha256.New()
	h.Write([]byte("damselfly plain blob pieces v1\x00"))
	h.Write(blob[:])
	return rafs.Digest(h.Sum(nil))
}

// Bounds of the plain blob state.
const (
	maxPlainTables   = 4096 // verified tables kept, oldest dropped first
	maxTableSources  = 3    // holders asked for a table before the origin
	maxPendingTables = 4096 // tables from peers awaiting their blob's check
)

// plainState is the node's piece tables. Safe for concurrent use.
type plainState struct {
	store tableStore

	mu      sync.Mutex
	tables  map[rafs.Digest]*plainTable
	order   []rafs.Digest // of tables, oldest first
	pending map[rafs.Digest]tableSource
	turns   map[rafs.Digest]struct{} // origin turns for piece 0
}

// plainTable is a verified table and its encoding, as served.
type plainTable struct {
	t   *piece.Table
	enc []byte
}

// tableSource is where a table not yet verified came from.
type tableSource struct {
	t        *piece.Table
	peer     lpeer.ID
	assigned bool // the Router named the peer for piece 0
	at       time.Time
}

func newPlainState(store tableStore) *plainState {
	return &plainState{
		store:   store,
		tables:  make(map[rafs.Digest]*plainTable),
		pending: make(map[rafs.Digest]tableSource),
		turns:   make(map[rafs.Digest]struct{}),
	}
}

func (p *plainState) get(blob rafs.Digest) *piece.Table {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.tables[blob]; e != nil {
		return e.t
	}
	return nil
}

// lookup is the TableServer's view: verified tables only.
func (p *plainState) lookup(blob rafs.Digest) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.tables[blob]; e != nil {
		return e.enc, true
	}
	return nil, false
}

// keep adds a verified table, persisting it unless it comes from the
// store.
func (p *plainState) keep(t *piece.Table) {
	p.add(t, true)
}

func (p *plainState) add(t *piece.Table, persist bool) {
	p.mu.Lock()
	if _, ok := p.tables[t.Blob]; ok {
		p.mu.Unlock()
		return
	}
	var dropped []rafs.Digest
	for len(p.order) >= maxPlainTables {
		dropped = append(dropped, p.order[0])
		delete(p.tables, p.order[0])
		p.order = p.order[1:]
	}
	e := &plainTable{t: t, enc: t.Encode()}
	p.tables[t.Blob] = e
	p.order = append(p.order, t.Blob)
	p.mu.Unlock()
	for _, b := range dropped {
		p.store.remove(b)
	}
	if persist {
		p.store.write(t.Blob, e.enc)
	}
}

func (p *plainState) forget(blob rafs.Digest) {
	p.mu.Lock()
	delete(p.tables, blob)
	delete(p.pending, blob)
	for i, b := range p.order {
		if b == blob {
			p.order = append(p.order[:i:i], p.order[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	p.store.remove(blob)
}

func (p *plainState) setPending(blob rafs.Digest, src tableSource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) >= maxPendingTables {
		for b, s := range p.pending { // drop the stale ones, else any
			if time.Since(s.at) > time.Hour || len(p.pending) >= maxPendingTables {
				delete(p.pending, b)
			}
		}
	}
	p.pending[blob] = src
}

func (p *plainState) takePending(blob rafs.Digest, t *piece.Table) (tableSource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	src, ok := p.pending[blob]
	if ok && src.t == t {
		delete(p.pending, blob)
		return src, true
	}
	return tableSource{}, false
}

func (p *plainState) setTurn(blob rafs.Digest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.turns) < maxPendingTables {
		p.turns[blob] = struct{}{}
	}
}

func (p *plainState) takeTurn(blob rafs.Digest) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.turns[blob]
	delete(p.turns, blob)
	return ok
}

// PieceTable implements proxy.BlobSource: the node's verified table of
// blob, else (with askPeers) a table from a peer that holds its first
// piece, as the Router names them (or, without a Router, as the node
// learnt them recently). A peer that answers with a broken table is
// avoided. When the Router gives this node the turn to fetch the first
// piece from origin, the turn is kept for the RecordBlob that follows.
func (n *Node) PieceTable(ctx context.Context, up registry.Ref, blob rafs.Digest, askPeers bool) (*piece.Table, bool) {
	if t := n.plain.get(blob); t != nil {
		return t, true
	}
	if !askPeers || n.eng.Closed() {
		return nil, false
	}
	var cands []lpeer.AddrInfo
	assigned := false
	key := plainKey(blob)
	rt, err := n.eng.Route(ctx, key, []uint32{0})
	switch {
	case err != nil:
		cands = n.eng.RecentParents(key, []uint32{0}, maxTableSources, func(id lpeer.ID) bool {
			return id == n.h.ID() || n.eng.Avoided(id)
		})
	case len(rt.Origin) > 0:
		n.plain.setTurn(blob)
		return nil, false
	default:
		assigned = true
		for _, p := range rt.Parents {
			if p.Info.ID == n.h.ID() || len(p.Chunks) == 0 {
				continue
			}
			n.eng.Learn(key, p.Info, p.Chunks)
			if !n.eng.Avoided(p.Info.ID) {
				cands = append(cands, p.Info)
			}
		}
	}
	for i, p := range cands {
		if i == maxTableSources || ctx.Err() != nil {
			break
		}
		if len(p.Addrs) > 0 {
			n.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.TempAddrTTL)
		}
		t, err := exchange.FetchTable(ctx, n.h, p.ID, blob)
		if err != nil {
			if errors.Is(err, exchange.ErrProtocol) {
				n.eng.AvoidBad(p.ID)
				n.m.BadPeer()
				n.log.Warn("peer sent a broken piece table; avoiding it", "peer", p.ID, "blob", blob, "err", err)
			} else {
				n.log.Debug("no piece table from peer", "peer", p.ID, "blob", blob, "err", err)
			}
			continue
		}
		n.plain.setPending(blob, tableSource{t: t, peer: p.ID, assigned: assigned, at: time.Now()})
		return t, false
	}
	return nil, false
}

// SettleTable implements proxy.BlobSource. A table that read the whole
// blob right is kept and served to peers from then on. One that did not
// is forgotten with every piece read through it (dropped from the cache
// and the holdings, so no peer is served them), and the peer it came
// from is reported and avoided.
func (n *Node) SettleTable(blob rafs.Digest, t *piece.Table, matched bool) {
	src, fromPeer := n.plain.takePending(blob, t)
	if matched {
		n.plain.keep(t)
		if fromPeer && src.assigned {
			n.router.Report(src.peer, route.Outcome{Blob: plainKey(blob), OK: true, Duration: time.Since(src.at)})
		}
		return
	}
	n.plain.forget(blob)
	n.dropPieces(blob, t)
	if !fromPeer {
		n.log.Error("a verified piece table read a blob that fails its digest", "blob", blob)
		return
	}
	n.eng.AvoidBad(src.peer)
	n.m.BadPeer()
	n.log.Warn("peer's piece table does not give its blob; avoiding it", "peer", src.peer, "blob", blob)
	if src.assigned {
		n.router.Report(src.peer, route.Outcome{Blob: plainKey(blob), BadBytes: true, BadChunk: 0, Duration: time.Since(src.at)})
	}
}

// dropPieces removes t's pieces from the cache and the holdings.
func (n *Node) dropPieces(blob rafs.Digest, t *piece.Table) {
	ords := make([]uint32, t.Count())
	for i, d := range t.Digests {
		ords[i] = uint32(i)
		_ = n.cache.Remove(cache.SHA256(d))
	}
	key := plainKey(blob)
	n.hold.remove(key, ords)
	n.router.Drop(key, ords)
}

// ReadPieces implements proxy.BlobSource: ReadChunks of pieces [first,
// last) of t, under the blob's plain key. With a nil deliver only the
// pieces the node cache does not hold are fetched (into the cache).
func (n *Node) ReadPieces(ctx context.Context, up registry.Ref, t *piece.Table, first, last int,
	deliver func(i int, c rafs.Chunk, b []byte) error) error {
	cs := t.Chunks(first, last)
	if deliver == nil {
		missing := cs[:0]
		for _, c := range cs {
			if !n.cache.Has(cache.KeyOf(c)) {
				missing = append(missing, c)
			}
		}
		cs = missing
		deliver = func(int, rafs.Chunk, []byte) error { return nil }
	}
	return n.eng.ReadPieces(ctx, up, plainKey(t.Blob), t.Blob, cs, deliver)
}

// RecordBlob implements proxy.BlobSource: the returned recorder cuts the
// blob streaming from the origin into pieces of NodeConfig.PieceSize and
// puts each piece in the cache as it completes (named by its own digest,
// so the entry is true whatever the blob turns out to be); only when the
// whole blob matched its digest are the pieces recorded as held,
// announced, and the table kept.
func (n *Node) RecordBlob(up registry.Ref, blob rafs.Digest) piece.Recorder {
	rec := &recorder{n: n, blob: blob}
	b, err := piece.NewBuilder(blob, n.cfg.PieceSize, func(i int, d rafs.Digest, p []byte) {
		c := rafs.Chunk{Digest: d, Ordinal: uint32(i), CompressedOffset: uint64(int64(i) * n.cfg.PieceSize),
			CompressedSize: uint32(len(p)), Size: uint32(len(p))}
		if err := n.cache.PutChunk(c, p); err != nil {
			n.log.Warn("caching a piece", "blob", blob, "piece", i, "err", err)
			rec.failed = true
		}
		rec.put = append(rec.put, d)
	})
	if err != nil { // PieceSize is validated; this is a bug
		n.log.Error("piece builder", "err", err)
		rec.failed = true
	}
	rec.b = b
	return rec
}

// recorder is RecordBlob's piece.Recorder.
type recorder struct {
	n      *Node
	blob   rafs.Digest
	b      *piece.Builder
	put    []rafs.Digest // pieces put in the cache
	failed bool
	done   bool
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.failed {
		return len(p), nil // keep the stream going; Finish drops it all
	}
	if _, err := r.b.Write(p); err != nil {
		r.failed = true
	}
	return len(p), nil
}

func (r *recorder) Finish(complete bool) error {
	if r.done {
		return nil
	}
	r.done = true
	n := r.n
	turn := n.plain.takeTurn(r.blob)
	key := plainKey(r.blob)
	var t *piece.Table
	err := errors.New("recording failed")
	if complete && !r.failed {
		t, err = r.b.Finish()
	} else if !complete {
		err = errors.New("blob not read whole")
	}
	if err != nil {
		for _, d := range r.put {
			_ = n.cache.Remove(cache.SHA256(d))
		}
		if turn {
			n.router.Abandon(key, []uint32{0})
		}
		return err
	}
	ords := make([]uint32, t.Count())
	for i, d := range t.Digests {
		ords[i] = uint32(i)
		n.hold.add(key, uint32(i), cache.SHA256(d))
	}
	n.plain.keep(t)
	n.router.Announce(key, ords)
	n.m.Delivered(fetch.SourceOrigin, int(t.Size))
	return nil
}
