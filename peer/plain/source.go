package plain

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
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

	"github.com/libp2p/go-libp2p/core/host"
)

// Key names the pieces of blob for the scheduler, the holdings and the chunk exchange
// by the blob's plain key, not its digest, so that piece ordinals never
// mix with the chunk ordinals of a RAFS blob with the same digest (a RAFS
// blob can be pulled through the mirror too). The origin is asked for the
// blob itself (fetch.Engine.ReadPieces takes both names).
func Key(blob rafs.Digest) rafs.Digest {
	h := sha256.New()
	h.Write([]byte("damselfly plain blob pieces v1\x00"))
	h.Write(blob[:])
	return rafs.Digest(h.Sum(nil))
}

// Source serves plain blobs to the mirror from pieces: it implements
// proxy.BlobSource over the node's fetch engine. Safe for concurrent use.
type Source struct {
	pieceSize     int64
	eng           *fetch.Engine
	h             host.Host
	cache         *cache.Cache
	router        fetch.Router
	hold          Holdings
	m             *fetch.Metrics
	log           *slog.Logger
	tables        *tableSet
	server        *exchange.TableServer
	origin        Origin // nil: no live pulls
	deadline      time.Duration
	maxRange      int64
	parentTimeout time.Duration

	liveMu   sync.Mutex
	lives    map[rafs.Digest]*live
	suspects map[rafs.Digest]*suspicion
}

// Holdings is the node's record of the chunks it holds, which pieces join
// under their blob's Key once the whole blob has been checked.
type Holdings interface {
	// Hold records that the node holds piece ordinal of a blob named
	// key, under cache key k.
	Hold(key rafs.Digest, ordinal uint32, k cache.Key) bool
	// Unhold forgets the pieces ordinals of the blob named key, and
	// tells the Router.
	Unhold(key rafs.Digest, ordinals []uint32)
}

// Config is what a Source needs besides its dependencies.
type Config struct {
	// PieceSize is the size of the pieces a blob streaming from the
	// origin is cut into (piece.MinSize to piece.MaxSize).
	PieceSize int64
	// Dir keeps the checked piece tables across restarts (Dir/piece-tables);
	// empty keeps none.
	Dir string
	// FetchDeadline bounds a live pull's wait for the digests of the
	// pieces a read needs (the engine's fetch_deadline).
	FetchDeadline time.Duration
	// OriginMaxRange is the most bytes of one ranged GET for pieces.
	OriginMaxRange int64
	// ParentTimeout bounds one request for pieces to a parent.
	ParentTimeout time.Duration
}

// Deps are a Source's dependencies, all required but Log.
type Deps struct {
	Engine   *fetch.Engine
	Host     host.Host
	Cache    *cache.Cache
	Router   fetch.Router
	Holdings Holdings
	Metrics  *fetch.Metrics
	Log      *slog.Logger
	// Origin, when not nil, lets nodes pulling a blob at once share its
	// pieces as they land (live pulls); without it a blob nobody has
	// whole passes through from the origin.
	Origin Origin
}

// New returns a Source, with the tables kept under cfg.Dir loaded, and
// serves its checked tables to peers over exchange.TableProtocolID until
// Close.
func New(cfg Config, d Deps) (*Source, error) {
	if d.Engine == nil || d.Host == nil || d.Cache == nil || d.Router == nil || d.Holdings == nil || d.Metrics == nil {
		return nil, errors.New("plain blobs: engine, host, cache, router, holdings and metrics are required")
	}
	if cfg.PieceSize < piece.MinSize || cfg.PieceSize > piece.MaxSize {
		return nil, fmt.Errorf("plain blobs: piece size %d is outside %d-%d", cfg.PieceSize, piece.MinSize, piece.MaxSize)
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ts := newTableSet(newTableStore(cfg.Dir, log))
	loaded, err := ts.store.load()
	if err != nil {
		return nil, err
	}
	for _, t := range loaded {
		ts.add(t, false)
	}
	s := &Source{pieceSize: cfg.PieceSize, eng: d.Engine, h: d.Host, cache: d.Cache, router: d.Router,
		hold: d.Holdings, m: d.Metrics, log: log, tables: ts, origin: d.Origin,
		deadline: cfg.FetchDeadline, maxRange: max(cfg.OriginMaxRange, cfg.PieceSize),
		lives: make(map[rafs.Digest]*live), suspects: make(map[rafs.Digest]*suspicion)}
	if s.deadline <= 0 {
		s.deadline = time.Minute
	}
	s.parentTimeout = cfg.ParentTimeout
	if s.parentTimeout <= 0 {
		s.parentTimeout = 30 * time.Second
	}
	s.server = exchange.NewTableServer(d.Host, s.lookup, log.With("part", "piecetable"))
	return s, nil
}

// Close stops serving tables to peers and the live pulls' scouts.
func (s *Source) Close() {
	s.server.Close()
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	for _, lv := range s.lives {
		lv.stopScout()
	}
}

// lookup is the table server's view: checked tables, else the partial
// table of a live pull.
func (s *Source) lookup(blob rafs.Digest) ([]byte, bool) {
	if enc, ok := s.tables.lookup(blob); ok {
		return enc, true
	}
	if lv := s.liveOf(blob); lv != nil {
		return lv.partial().Encode(), true
	}
	return nil, false
}

// PieceTable implements proxy.BlobSource: the node's verified table of
// blob; else, with askPeers, a table from a peer that holds its first
// piece, as the Router names them (or, without a Router, as the node
// learnt them recently), or the table of a live pull (live.go) when the
// blob is being pulled by others (or this node) at this moment and nobody
// has it whole, or no scheduler answers. A peer that answers with a
// broken table is avoided. nil means: pass the blob through from the
// origin, recording it; so it is for a blob whose last live pull here
// failed, and when no live pull can be made (no size from the origin).
func (s *Source) PieceTable(ctx context.Context, up registry.Ref, blob rafs.Digest, askPeers bool) (*piece.Table, bool) {
	if t := s.tables.get(blob); t != nil {
		return t, true
	}
	if !askPeers || s.eng.Closed() || s.suspect(blob) {
		return nil, false
	}
	if lv := s.liveOf(blob); lv != nil {
		return lv.t, false
	}
	var cands []lpeer.AddrInfo
	assigned := false
	key := Key(blob)
	rt, err := s.eng.Route(ctx, key, []uint32{0}, nil)
	switch {
	case err != nil:
		cands = s.eng.RecentParents(key, []uint32{0}, maxTableSources, func(id lpeer.ID) bool {
			return id == s.h.ID() || s.eng.Avoided(id)
		})
	case len(rt.Origin) > 0:
		if lv := s.startLive(ctx, up, blob, true, nil, ""); lv != nil {
			return lv.t, false
		}
		if t := s.tableFromConnected(ctx, blob, nil); t != nil {
			s.router.Abandon(key, rt.Origin)
			return t, false
		}
		s.tables.setTurn(blob)
		return nil, false
	case len(rt.Parents) == 0:
		// Another node is fetching the first piece: pull beside it.
		if lv := s.startLive(ctx, up, blob, false, nil, ""); lv != nil {
			return lv.t, false
		}
		return s.tableFromConnected(ctx, blob, nil), false
	default:
		assigned = true
		for _, p := range rt.Parents {
			if p.Info.ID == s.h.ID() || len(p.Chunks) == 0 {
				continue
			}
			s.eng.Learn(key, p.Info, p.Chunks)
			if !s.eng.Avoided(p.Info.ID) {
				cands = append(cands, p.Info)
			}
		}
	}
	for i, p := range cands {
		if i == maxTableSources || ctx.Err() != nil {
			break
		}
		if len(p.Addrs) > 0 {
			s.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.TempAddrTTL)
		}
		t, err := exchange.FetchTable(ctx, s.h, p.ID, blob)
		if err != nil {
			if errors.Is(err, exchange.ErrProtocol) {
				s.eng.AvoidBad(p.ID)
				s.m.BadPeer()
				s.log.Warn("peer sent a broken piece table; avoiding it", "peer", p.ID, "blob", blob, "err", err)
			} else {
				s.log.Debug("no piece table from peer", "peer", p.ID, "blob", blob, "err", err)
			}
			continue
		}
		if !t.Complete() {
			// The peer is pulling the blob itself: join in.
			if lv := s.startLive(ctx, up, blob, false, t, p.ID); lv != nil {
				return lv.t, false
			}
			continue
		}
		s.tables.setPending(blob, tableSource{t: t, peer: p.ID, assigned: assigned, at: time.Now()})
		return t, false
	}
	// No table to read through (no scheduler answered in time, or the
	// holders' tables could not be had): pull live all the same, so that
	// the pieces this node fetches are shared, and the Router is asked
	// again piece by piece. Only when that cannot be made does the blob
	// pass through.
	if lv := s.startLive(ctx, up, blob, false, nil, ""); lv != nil {
		return lv.t, false
	}
	asked := make(map[lpeer.ID]bool, len(cands))
	for _, p := range cands {
		asked[p.ID] = true
	}
	return s.tableFromConnected(ctx, blob, asked), false
}

// tableFromConnected asks the peers this node is connected to (not those
// in asked, at most maxTableSources) for a complete table of blob, and
// returns the first, pending its check like a holder's. It is the last
// try before the blob passes through to the origin, made when no live
// pull can be made either, which is when the origin cannot be reached
// (no size): a node that joined during an outage, or whose scheduler has
// not caught up, still finds the blob at the peers that hold it. nil if
// none has it.
func (s *Source) tableFromConnected(ctx context.Context, blob rafs.Digest, asked map[lpeer.ID]bool) *piece.Table {
	n := 0
	for _, id := range s.h.Network().Peers() {
		if n == maxTableSources || ctx.Err() != nil {
			break
		}
		if id == s.h.ID() || asked[id] || s.eng.Avoided(id) {
			continue
		}
		if ok, err := s.h.Peerstore().SupportsProtocols(id, exchange.TableProtocolID); err != nil || len(ok) == 0 {
			continue
		}
		n++
		t, err := exchange.FetchTable(ctx, s.h, id, blob)
		if err != nil {
			if errors.Is(err, exchange.ErrProtocol) {
				s.eng.AvoidBad(id)
				s.m.BadPeer()
				s.log.Warn("peer sent a broken piece table; avoiding it", "peer", id, "blob", blob, "err", err)
			}
			continue
		}
		if !t.Complete() {
			continue
		}
		s.log.Info("plain blob: piece table from a connected peer, as nothing else could serve it", "peer", id, "blob", blob)
		s.tables.setPending(blob, tableSource{t: t, peer: id, at: time.Now()})
		// Its pieces are likely there too: the engine asks it when no
		// Router names parents (recent parents).
		all := make([]uint32, t.Count())
		for i := range all {
			all[i] = uint32(i)
		}
		s.eng.Learn(Key(blob), lpeer.AddrInfo{ID: id}, all)
		return t
	}
	return nil
}

// SettleTable implements proxy.BlobSource. A table that read the whole
// blob right is kept and served to peers from then on. One that did not
// is forgotten with every piece read through it (dropped from the cache
// and the holdings, so no peer is served them), and the peer it came
// from is reported and avoided.
func (s *Source) SettleTable(blob rafs.Digest, t *piece.Table, matched bool) {
	if lv := s.liveFor(t); lv != nil {
		if matched {
			s.settleLive(lv)
		} else {
			s.failLive(lv, errors.New("the blob fails its digest"))
		}
		return
	}
	src, fromPeer := s.tables.takePending(blob, t)
	if matched {
		s.tables.keep(t)
		if fromPeer && src.assigned {
			s.router.Report(src.peer, route.Outcome{Blob: Key(blob), OK: true, Duration: time.Since(src.at)})
		}
		return
	}
	s.forget(blob, t)
	// The retry goes to the origin: a live pull now could meet the same
	// table again from another holder of its pieces.
	s.markSuspect(blob, nil)
	if !fromPeer {
		s.log.Error("a verified piece table read a blob that fails its digest", "blob", blob)
		return
	}
	s.eng.AvoidBad(src.peer)
	s.m.BadPeer()
	s.log.Warn("peer's piece table does not give its blob; avoiding it", "peer", src.peer, "blob", blob)
	if src.assigned {
		s.router.Report(src.peer, route.Outcome{Blob: Key(blob), BadBytes: true, BadChunk: 0, Duration: time.Since(src.at)})
	}
}

// Forget drops the node's checked table of blob, if it has one, with
// every piece read through it: the node then neither serves the blob
// from its cache nor tells peers it holds it.
func (s *Source) Forget(blob rafs.Digest) {
	if t := s.tables.get(blob); t != nil {
		s.forget(blob, t)
	}
}

// forget drops blob's table and t's pieces from the cache and the
// holdings.
func (s *Source) forget(blob rafs.Digest, t *piece.Table) {
	s.tables.forget(blob)
	ords := make([]uint32, t.Count())
	for i, d := range t.Digests {
		ords[i] = uint32(i)
		_ = s.cache.Remove(cache.SHA256(d))
	}
	s.hold.Unhold(Key(blob), ords)
}

// ReadPieces implements proxy.BlobSource: ReadChunks of pieces [first,
// last) of t, under the blob's plain key. With a nil deliver only the
// pieces the node cache does not hold are fetched (into the cache).
func (s *Source) ReadPieces(ctx context.Context, up registry.Ref, t *piece.Table, first, last int,
	deliver func(i int, c rafs.Chunk, b []byte) error) error {
	if lv := s.liveFor(t); lv != nil {
		lv.read.Store(time.Now().UnixNano())
		err := s.resolve(ctx, up, lv, first, last)
		if err == nil {
			err = s.eng.ReadPieces(ctx, up, Key(t.Blob), t.Blob, s.missing(lv.chunks(first, last), deliver), s.deliverOrDrop(deliver))
		}
		if err != nil && deliver != nil && ctx.Err() == nil {
			// A read through the live pull failed (a piece nobody could
			// serve in time, or bytes that match no digest named): the
			// client's retry must not join it again.
			s.failLive(lv, err)
		}
		return err
	}
	return s.eng.ReadPieces(ctx, up, Key(t.Blob), t.Blob, s.missing(t.Chunks(first, last), deliver), s.deliverOrDrop(deliver))
}

// missing is cs, less the pieces the node cache holds when deliver is
// nil (a prefetch: only what is missing is fetched).
func (s *Source) missing(cs []rafs.Chunk, deliver func(int, rafs.Chunk, []byte) error) []rafs.Chunk {
	if deliver != nil {
		return cs
	}
	out := cs[:0]
	for _, c := range cs {
		if !s.cache.Has(cache.KeyOf(c)) {
			out = append(out, c)
		}
	}
	return out
}

// deliverOrDrop is deliver, or one that keeps nothing when it is nil.
func (s *Source) deliverOrDrop(deliver func(int, rafs.Chunk, []byte) error) func(int, rafs.Chunk, []byte) error {
	if deliver != nil {
		return deliver
	}
	return func(int, rafs.Chunk, []byte) error { return nil }
}

// RecordBlob implements proxy.BlobSource: the returned recorder cuts the
// blob streaming from the origin into pieces of NodeConfig.PieceSize and
// puts each piece in the cache as it completes (named by its own digest,
// so the entry is true whatever the blob turns out to be); only when the
// whole blob matched its digest are the pieces recorded as held,
// announced, and the table kept.
func (s *Source) RecordBlob(up registry.Ref, blob rafs.Digest) piece.Recorder {
	rec := &recorder{s: s, blob: blob}
	b, err := piece.NewBuilder(blob, s.pieceSize, func(i int, d rafs.Digest, p []byte) {
		c := rafs.Chunk{Digest: d, Ordinal: uint32(i), CompressedOffset: uint64(int64(i) * s.pieceSize),
			CompressedSize: uint32(len(p)), Size: uint32(len(p))}
		if err := s.cache.PutChunk(c, p); err != nil {
			s.log.Warn("caching a piece", "blob", blob, "piece", i, "err", err)
			rec.failed = true
		}
		rec.put = append(rec.put, d)
	})
	if err != nil { // PieceSize is validated; this is a bug
		s.log.Error("piece builder", "err", err)
		rec.failed = true
	}
	rec.b = b
	return rec
}

// recorder is RecordBlob's piece.Recorder.
type recorder struct {
	s      *Source
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
	s := r.s
	turn := s.tables.takeTurn(r.blob)
	key := Key(r.blob)
	var t *piece.Table
	err := errors.New("recording failed")
	if complete && !r.failed {
		t, err = r.b.Finish()
	} else if !complete {
		err = errors.New("blob not read whole")
	}
	if err != nil {
		for _, d := range r.put {
			_ = s.cache.Remove(cache.SHA256(d))
		}
		if turn {
			s.router.Abandon(key, []uint32{0})
		}
		return err
	}
	ords := make([]uint32, t.Count())
	for i, d := range t.Digests {
		ords[i] = uint32(i)
		s.hold.Hold(key, uint32(i), cache.SHA256(d))
	}
	s.tables.keep(t)
	s.router.Announce(key, ords)
	s.m.Delivered(fetch.SourceOrigin, int(t.Size))
	s.convict(t)
	return nil
}
