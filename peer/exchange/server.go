package exchange

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/cache"
)

// Store is where a Server finds the chunks it serves; *cache.Cache is one.
type Store interface {
	// Get appends the stored bytes of the chunk whose key (digest and
	// digest algorithm) is k to dst[:0] and returns them with their
	// metadata; the result aliases dst when its capacity suffices, and
	// is otherwise the caller's, which may give it to rafs/bufpool; the
	// Store keeps neither. It returns an error wrapping
	// cache.ErrNotFound for a chunk it does not hold under k, also when it
	// holds the same digest under the other algorithm. It may block on
	// disk I/O and is safe for concurrent use.
	Get(k cache.Key, dst []byte) (cache.Meta, []byte, error)
}

// remover is the optional capability of a Store to drop an entry that
// failed verification (*cache.Cache has it).
type remover interface {
	Remove(k cache.Key) error
}

// haser is the optional capability of a Store to say whether it holds an
// entry, without reading it (*cache.Cache has it). A Server with it
// answers a chunk held only under the other digest algorithm with
// chunkOtherAlgo rather than chunkNotFound.
type haser interface {
	Has(k cache.Key) bool
}

var (
	_ Store   = (*cache.Cache)(nil)
	_ remover = (*cache.Cache)(nil)
	_ haser   = (*cache.Cache)(nil)
)

// Server answers chunk requests from other peers out of a Store. It serves
// a chunk only to a requester that names its digest, and only bytes that
// the Store holds under that digest.
type Server struct {
	h     host.Host
	store Store
	cfg   ServerConfig
	log   *slog.Logger
	lim   *fairLimiter
	// onMiss, if set, is told of each chunk asked for that the Store did
	// not hold (SetMissHook).
	onMiss atomic.Pointer[func(blob rafs.Digest, k cache.Key)]
	// partOf, if set, says whether a chunk is known to be part of a blob
	// (SetPartOfHook).
	partOf atomic.Pointer[func(blob rafs.Digest, k cache.Key) bool]

	mu      sync.Mutex
	closed  bool
	perPeer map[peer.ID]int
	active  map[network.Stream]context.CancelFunc
	wg      sync.WaitGroup // handlers admitted and not yet done

	n counters
}

// NewServer validates cfg and registers a Server for ProtocolID on h. log
// may be nil. Close unregisters it.
func NewServer(h host.Host, store Store, cfg ServerConfig, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("exchange server config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		h:       h,
		store:   store,
		cfg:     cfg,
		log:     log,
		lim:     newFairLimiter(cfg.UploadBytesPerSec, cfg.burst()),
		perPeer: make(map[peer.ID]int),
		active:  make(map[network.Stream]context.CancelFunc),
	}
	h.SetStreamHandler(ProtocolID, s.handle)
	return s, nil
}

// SetMissHook has f told of every chunk a peer asked for that the Store
// does not hold, by its key, before the "not found" answer is sent: a
// node whose holdings still list it can drop it at once
// (peer.Node.Missed). f runs on the serving goroutine and must be quick;
// nil removes the hook.
func (s *Server) SetMissHook(f func(blob rafs.Digest, k cache.Key)) {
	if f == nil {
		s.onMiss.Store(nil)
		return
	}
	s.onMiss.Store(&f)
}

// SetPartOfHook has f decide, before the Store is asked, whether a chunk
// asked for as part of a blob is known to be part of it
// (peer.Node.PartOf): a chunk it is not is answered "not found", so that
// naming a blob the requester may read does not get it a chunk of another
// one. f runs on the serving goroutine and must be quick; nil removes the
// hook (every chunk the Store holds is served).
func (s *Server) SetPartOfHook(f func(blob rafs.Digest, k cache.Key) bool) {
	if f == nil {
		s.partOf.Store(nil)
		return
	}
	s.partOf.Store(&f)
}

// Close unregisters the server, resets the streams it is serving and waits
// for their handlers to return. It is idempotent and returns nil.
func (s *Server) Close() error {
	s.h.RemoveStreamHandler(ProtocolID)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for st, cancel := range s.active {
		cancel()
		st.Reset()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.lim.Close()
	return nil
}

func (s *Server) handle(st network.Stream) {
	p := st.Conn().RemotePeer()
	ctx, status := s.admit(st, p)
	if status != StatusOK {
		s.refuse(st, p, status)
		return
	}
	defer s.release(st, p)
	s.serve(ctx, st, p)
}

// admit counts st against the limits, or says why it may not be served.
func (s *Server) admit(st network.Stream, p peer.ID) (context.Context, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, StatusUnavailable
	case s.perPeer[p] >= s.cfg.MaxStreamsPerPeer, len(s.active) >= s.cfg.MaxStreams:
		return nil, StatusBusy
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.perPeer[p]++
	s.active[st] = cancel
	s.wg.Add(1)
	return ctx, StatusOK
}

func (s *Server) release(st network.Stream, p peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel, ok := s.active[st]; ok {
		cancel()
		delete(s.active, st)
	}
	if s.perPeer[p] <= 1 {
		delete(s.perPeer, p)
	} else {
		s.perPeer[p]--
	}
	s.wg.Done()
}

// refuse answers st with status and closes it, without reading the
// request.
func (s *Server) refuse(st network.Stream, p peer.ID, status Status) {
	if status == StatusBusy {
		s.n.busy.Add(1)
	}
	s.log.Debug("exchange: refused stream", "peer", p, "status", status)
	s.answer(st, status, "")
}

// answer writes a response header with a non-OK status and closes st.
func (s *Server) answer(st network.Stream, status Status, msg string) {
	_ = st.SetWriteDeadline(time.Now().Add(s.cfg.StreamTimeout))
	if _, err := st.Write(appendResponseHead(nil, status, msg)); err != nil {
		st.Reset()
		return
	}
	st.Close()
}

// serve reads st's request and answers it.
func (s *Server) serve(ctx context.Context, st network.Stream, p peer.ID) {
	_ = st.SetReadDeadline(time.Now().Add(s.cfg.StreamTimeout))
	req, err := readRequest(st)
	if err != nil {
		if errors.Is(err, ErrInvalidRequest) {
			s.n.badRequests.Add(1)
			s.log.Warn("exchange: bad request", "peer", p, "err", err)
			s.answer(st, StatusBadRequest, err.Error())
			return
		}
		s.n.aborted.Add(1)
		s.log.Debug("exchange: reading request", "peer", p, "err", err)
		st.Reset()
		return
	}
	_ = st.CloseRead() // the requester sends nothing more
	s.n.streams.Add(1)

	if err := s.sendAll(ctx, st, p, req); err != nil {
		s.n.aborted.Add(1)
		s.log.Debug("exchange: sending chunks", "peer", p, "blob", req.blob, "err", err)
		st.Reset()
		return
	}
	st.Close()
}

// sendAll writes the OK header and one record per requested chunk.
func (s *Server) sendAll(ctx context.Context, st network.Stream, p peer.ID, req *request) error {
	if err := s.write(ctx, st, p, appendResponseHead(nil, StatusOK, ""), false); err != nil {
		return err
	}
	// The stream's record buffer: room for a record's header, then the
	// chunk's bytes. Taken from the pool at the size of the largest chunk
	// asked for when the pool has one (memory that costs nothing new: a
	// peer asking for chunks this node does not hold must not make it
	// allocate), else grown as held chunks need.
	var buf []byte
	if b, ok := bufpool.Take(recordHeaderSize + largest(req.chunks)); ok {
		buf = b
	}
	defer func() { bufpool.Put(buf) }()
	var scratch *[]byte
	if !s.cfg.NoVerify {
		scratch = bufPool.Get().(*[]byte)
		defer bufPool.Put(scratch)
	}
	for _, c := range req.chunks {
		rec := s.lookup(req.blob, c, &buf, scratch)
		if err := s.write(ctx, st, p, rec, true); err != nil {
			return fmt.Errorf("chunk %s: %w", c.Digest, err)
		}
		if n := len(rec) - recordHeaderSize; n > 0 {
			s.n.chunksSent.Add(1)
			s.n.bytesSent.Add(uint64(n))
		}
	}
	return nil
}

// largest returns the largest stored size cs allow, at most bufpool.Max.
func largest(cs []rafs.Chunk) int {
	n := 0
	for _, c := range cs {
		n = max(n, int(min(allowance(c), bufpool.Max)))
	}
	return n
}

// lookup returns the whole record for c: header and, when the chunk is
// held, its stored bytes, in *bp (replaced by a larger pool buffer as
// needed). Nothing chunk-sized is allocated before the Store found the
// chunk, and then only what it holds: a request names sizes of up to 16
// MiB per chunk, and a peer asking for chunks this node does not have
// must not cost it that.
func (s *Server) lookup(blob rafs.Digest, c rafs.Chunk, bp, scratch *[]byte) []byte {
	buf := *bp
	if cap(buf) < recordHeaderSize {
		buf = make([]byte, recordHeaderSize) // no chunk-sized buffer before one is found
		*bp = buf
	}
	buf = buf[:cap(buf)]
	// Get into the buffer after room for the header, so that header and
	// bytes go out as one write; Get grows it, for a chunk it holds,
	// when it is too small. The key is digest and algorithm: a chunk
	// held under the other algorithm is not the one asked for.
	k := cache.KeyOf(c)
	if f := s.partOf.Load(); f != nil && !(*f)(blob, k) {
		s.n.notFound.Add(1)
		if ok, other := otherAlgo(k); other && (*f)(blob, ok) {
			// Part of the blob under the other algorithm: the
			// request's description is wrong (see below).
			return appendRecordHead(buf[:0], chunkOtherAlgo, false, 0)
		}
		return appendRecordHead(buf[:0], chunkNotFound, false, 0)
	}
	m, stored, err := s.store.Get(k, buf[recordHeaderSize:recordHeaderSize])
	switch {
	case errors.Is(err, cache.ErrNotFound):
		s.n.notFound.Add(1)
		if h, ok := s.store.(haser); ok && hasOther(h, k) {
			// Held, under the other algorithm: the request's
			// description is wrong, and this node still holds what
			// it announced. Not a miss to drop from the holdings.
			return appendRecordHead(buf[:0], chunkOtherAlgo, false, 0)
		}
		if f := s.onMiss.Load(); f != nil {
			(*f)(blob, k)
		}
		return appendRecordHead(buf[:0], chunkNotFound, false, 0)
	case err != nil:
		s.n.chunkErrors.Add(1)
		s.log.Warn("exchange: reading chunk", "key", k, "err", err)
		return appendRecordHead(buf[:0], chunkError, false, 0)
	case m.Size != c.Size || m.StoredSize > allowance(c) || int(m.StoredSize) != len(stored):
		// Held in a form the requester's description does not allow.
		s.n.notFound.Add(1)
		return appendRecordHead(buf[:0], chunkNotFound, false, 0)
	}
	sc := served(c, m.Compressed, m.StoredSize)
	if scratch != nil {
		if err := rafs.VerifyChunk(sc, stored, scratch); err != nil {
			s.n.corrupt.Add(1)
			s.log.Warn("exchange: cached chunk fails verification; dropping it", "key", k, "err", err)
			if r, ok := s.store.(remover); ok && r.Remove(k) == nil {
				if f := s.onMiss.Load(); f != nil {
					(*f)(blob, k)
				}
			}
			return appendRecordHead(buf[:0], chunkNotFound, false, 0)
		}
	}
	head := appendRecordHead(nil, chunkOK, m.Compressed, m.StoredSize)
	if len(buf) > recordHeaderSize && &stored[0] == &buf[recordHeaderSize] {
		copy(buf, head)
		return buf[:recordHeaderSize+len(stored)]
	}
	// The Store did not use the buffer: it was too small for the chunk
	// (or the Store ignores dst). Copy into a pool buffer that fits, and
	// keep it for the next chunks of the stream; the Store's buffer and
	// the old one go back.
	out := bufpool.Get(recordHeaderSize + len(stored))
	copy(out, head)
	copy(out[recordHeaderSize:], stored)
	bufpool.Put(stored)
	bufpool.Put(*bp)
	*bp = out
	return out
}

// hasOther reports whether h holds k's digest under the other algorithm
// (otherAlgo); never for a blake3-stored key.
func hasOther(h haser, k cache.Key) bool {
	ok, other := otherAlgo(k)
	return other && h.Has(ok)
}

// write sends b to st in slices, each of which must be written within
// StreamTimeout. When the upload is limited, the slices of a record
// (sliceSize bytes after its header) pass the limiter first.
func (s *Server) write(ctx context.Context, st network.Stream, p peer.ID, b []byte, record bool) error {
	limited := record && s.lim != nil
	slice := unlimitedSlice
	if limited {
		slice = sliceSize
	}
	first := min(len(b), recordHeaderSize+slice)
	for len(b) > 0 {
		n := min(len(b), first)
		first = slice
		if limited {
			if err := s.lim.Wait(ctx, p, n); err != nil {
				return err
			}
		}
		_ = st.SetWriteDeadline(time.Now().Add(s.cfg.StreamTimeout))
		if _, err := st.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// bufPool holds chunk buffers, grown to the largest chunk each has held.
// A new one is empty: it grows when a chunk is found (server) or decoded
// (client), to that chunk's size.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}
