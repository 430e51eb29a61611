package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"damselfly/scheduler/preheatwire"
)

// Bounds of one preheat stream's I/O.
const (
	preheatRequestTimeout = 10 * time.Second // reading the request
	preheatWriteTimeout   = 10 * time.Second // writing one frame
	preheatLingerTimeout  = 10 * time.Second // waiting for the scheduler to close after the result
)

// Preheater does the work of a preheat: it fetches the chunks of image
// into the node cache (every chunk, or with prefetchOnly those of the
// files its prefetch table names). It calls total with the chunks and
// stored bytes it is to fetch, in one or more parts, and done with the
// stored bytes of each chunk that is in; both are safe for concurrent
// use and do not block. It returns nil when every chunk is in, an error
// saying why when one failed, and when ctx is done. The peer's preheat
// worker (peer/preheat) implements it; the stream, its framing and its
// progress reports are this package's.
type Preheater interface {
	Preheat(ctx context.Context, image string, prefetchOnly bool, total func(chunks, bytes uint64), done func(bytes uint64)) error
}

// PreheatServer serves the preheat protocol (scheduler/preheatwire) on a
// peer: a scheduler the peer is configured with asks it to fetch an
// image's chunks into the node cache, and is sent progress until the
// result. The scheduler closing or resetting its side of the stream
// cancels the work.
type PreheatServer struct {
	h       host.Host
	work    Preheater
	cfg     PreheatConfig
	allowed map[peer.ID]bool
	log     *slog.Logger

	life context.Context // done when the server is closed
	stop context.CancelFunc

	mu      sync.Mutex
	closed  bool
	running int
	wg      sync.WaitGroup // stream handlers
}

// NewPreheatServer returns a PreheatServer that has work do the preheats
// and registers its stream handler on h. Close unregisters it and ends
// the preheats in progress. log may be nil.
func NewPreheatServer(h host.Host, cfg PreheatConfig, work Preheater, log *slog.Logger) (*PreheatServer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("preheat config: %w", err)
	}
	if h == nil || work == nil {
		return nil, errors.New("preheat: host and worker are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ids, _ := cfg.schedulerIDs() // Validate parsed them
	life, stop := context.WithCancel(context.Background())
	p := &PreheatServer{h: h, work: work, cfg: cfg, allowed: ids, log: log, life: life, stop: stop}
	h.SetStreamHandler(preheatwire.ProtocolID, p.handle)
	return p, nil
}

// Running returns how many preheats are in progress. Safe for concurrent
// use.
func (p *PreheatServer) Running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// Close stops taking preheat streams, cancels those in progress and waits
// for them to end. It is idempotent.
func (p *PreheatServer) Close() error {
	p.h.RemoveStreamHandler(preheatwire.ProtocolID)
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stop()
	p.wg.Wait()
	return nil
}

// admit counts a stream in; it fails when the server is closed or at
// MaxJobs.
func (p *PreheatServer) admit() (ok, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, true
	}
	if p.running >= p.cfg.MaxJobs {
		return false, false
	}
	p.running++
	p.wg.Add(1)
	return true, false
}

func (p *PreheatServer) release() {
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
	p.wg.Done()
}

// handle serves one preheat stream.
func (p *PreheatServer) handle(st network.Stream) {
	from := st.Conn().RemotePeer()
	if !p.allowed[from] {
		p.log.Warn("preheat refused: not a scheduler of this peer", "peer", from)
		refuse(st, "not a scheduler of this peer")
		return
	}
	ok, closed := p.admit()
	if closed {
		_ = st.Reset()
		return
	}
	if !ok {
		refuse(st, fmt.Sprintf("busy: %d preheats running", p.cfg.MaxJobs))
		return
	}
	defer p.release()

	_ = st.SetReadDeadline(time.Now().Add(preheatRequestTimeout))
	m, err := preheatwire.ReadFrame(st)
	if err != nil {
		if errors.Is(err, preheatwire.ErrMalformed) {
			refuse(st, err.Error())
			return
		}
		_ = st.Reset()
		return
	}
	req, isReq := m.(*preheatwire.Request)
	if !isReq {
		refuse(st, fmt.Sprintf("got a %s frame, want a request", m.Type()))
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	p.serve(st, req)
}

// serve runs one preheat: a watcher cancels it when the scheduler closes
// or resets its side, a ticker sends progress, and the result goes last.
func (p *PreheatServer) serve(st network.Stream, req *preheatwire.Request) {
	ctx, cancel := context.WithCancel(p.life)
	defer cancel()
	log := p.log.With("image", req.Image, "prefetch_only", req.PrefetchOnly, "scheduler", st.Conn().RemotePeer())
	log.Info("preheat started")
	start := time.Now()

	var wg sync.WaitGroup
	defer wg.Wait()
	// The scheduler sends nothing more: any end of its side (EOF, reset,
	// a dead connection) cancels the work.
	wg.Go(func() {
		_, _ = io.Copy(io.Discard, st)
		cancel()
	})
	var wmu sync.Mutex
	write := func(m preheatwire.Message) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = st.SetWriteDeadline(time.Now().Add(preheatWriteTimeout))
		return preheatwire.WriteFrame(st, m)
	}
	var c preheatCounts
	tick := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(p.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-tick:
				return
			case <-t.C:
				if err := write(&preheatwire.Progress{Counts: c.snapshot()}); err != nil {
					cancel()
					return
				}
			}
		}
	})

	err := p.work.Preheat(ctx, req.Image, req.PrefetchOnly, c.total, c.done)
	if err == nil {
		err = ctx.Err()
	}
	close(tick)
	res := &preheatwire.Result{Counts: c.snapshot(), OK: err == nil}
	if err != nil {
		res.Message = err.Error()
	}
	if ctx.Err() != nil {
		// Cancelled by the scheduler (or Close): nobody reads a result.
		log.Info("preheat cancelled", "chunks", res.ChunksDone, "of", res.ChunksTotal)
		_ = st.Reset()
		return
	}
	if err != nil {
		log.Warn("preheat failed", "err", err, "chunks", res.ChunksDone, "of", res.ChunksTotal)
	} else {
		log.Info("preheat done", "chunks", res.ChunksTotal, "bytes", res.BytesTotal, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := write(res); err != nil {
		_ = st.Reset()
		return
	}
	_ = st.CloseWrite()
	// Wait (boundedly) for the scheduler to close its side, so that the
	// result is read before the stream goes away.
	_ = st.SetReadDeadline(time.Now().Add(preheatLingerTimeout))
	wg.Wait()
	_ = st.Close()
}

// refuse answers a stream with a failed result and closes it.
func refuse(st network.Stream, msg string) {
	_ = st.SetWriteDeadline(time.Now().Add(preheatWriteTimeout))
	if err := preheatwire.WriteFrame(st, &preheatwire.Result{Message: msg}); err != nil {
		_ = st.Reset()
		return
	}
	_ = st.Close()
}

// preheatCounts are a preheat's counters, read by the progress writer
// while the worker adds to them.
type preheatCounts struct {
	chunksDone, chunksTotal atomic.Uint64
	bytesDone, bytesTotal   atomic.Uint64
}

func (c *preheatCounts) total(chunks, bytes uint64) {
	c.chunksTotal.Add(chunks)
	c.bytesTotal.Add(bytes)
}

func (c *preheatCounts) done(bytes uint64) {
	c.chunksDone.Add(1)
	c.bytesDone.Add(bytes)
}

func (c *preheatCounts) snapshot() preheatwire.Counts {
	// Totals are loaded last so that done never passes them.
	out := preheatwire.Counts{ChunksDone: c.chunksDone.Load(), BytesDone: c.bytesDone.Load()}
	out.ChunksTotal = max(c.chunksTotal.Load(), out.ChunksDone)
	out.BytesTotal = max(c.bytesTotal.Load(), out.BytesDone)
	return out
}
