package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/flight"
	"damselfly/rafs/registry"
	"damselfly/rafs/route"
)

// ErrClosed is returned by reads of an Engine that was closed.
var ErrClosed = errors.New("fetch: engine closed")

// Config is the engine's tuning; peer.NodeConfig documents each field
// (the node's configuration carries them, with their YAML keys).
type Config struct {
	FetchDeadline      time.Duration
	RouteTimeout       time.Duration
	ParentTimeout      time.Duration
	HedgeDelay         time.Duration // 0: no hedging
	AvoidDuration      time.Duration
	SlowAvoidDuration  time.Duration
	MaxParallelParents int
	OriginMaxRange     int64
	MaxParallelOrigin  int
	MaxRetryDelay      time.Duration
}

// Cache is the node cache as the engine uses it; *cache.Cache is one.
// Methods are safe for concurrent use.
type Cache interface {
	// Has reports whether an entry for k exists, without reading it.
	Has(k cache.Key) bool
	// GetVerified returns k's entry: its metadata and stored bytes (into
	// buf if it is big enough, else into a buffer that is the caller's
	// and may go to rafs/bufpool), checked with verify unless the cache
	// knows them to be right already (it wrote or verified that very
	// file). It fails if there is none, or if verify refuses the bytes
	// (the entry is then removed).
	GetVerified(k cache.Key, buf []byte, verify func(cache.Meta, []byte) error) (cache.Meta, []byte, error)
	// PutChunk stores c's verified stored bytes under c's key.
	PutChunk(c rafs.Chunk, stored []byte) error
	// Remove deletes k's entry, if any.
	Remove(k cache.Key) error
}

var _ Cache = (*cache.Cache)(nil)

// Holdings is what the node knows it holds, per blob (peer.Node keeps
// it). Methods are safe for concurrent use and do not block.
type Holdings interface {
	// PartOf reports whether chunk k is known to be part of blob: only
	// then is a cached copy used for a read of blob.
	PartOf(blob rafs.Digest, k cache.Key) bool
	// Hold records that the node holds chunk ordinal of blob under key
	// k, and reports whether that is news.
	Hold(blob rafs.Digest, ordinal uint32, k cache.Key) bool
	// Missed is told that chunk k of blob, just recorded, is gone from
	// the cache: the holding is dropped and the Router told.
	Missed(blob rafs.Digest, k cache.Key)
}

// Origin reads byte ranges of blobs from the origin registry; the
// upstream client (rafs/registry) is one.
type Origin interface {
	// ReadRange fills p with the bytes of blob from offset off, as ref
	// says where to find it. It fails unless p is filled whole. Safe for
	// concurrent use.
	ReadRange(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte) error
}

// StreamingOrigin is an Origin that reports a read's progress, so that
// the chunks of a range are verified while the rest arrives; the
// upstream client is one. The engine finds it by type assertion.
type StreamingOrigin interface {
	Origin
	// ReadRangeFunc is ReadRange that calls progress(n), on the calling
	// goroutine, each time p[:n] has grown; bytes once reported are
	// final.
	ReadRangeFunc(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte, progress func(n int)) error
}

var _ StreamingOrigin = (*registry.Client)(nil)

// Deps are what an Engine works with. Host, Cache, Holdings and Origin
// are required.
type Deps struct {
	Host     host.Host // the chunk exchange with parents (peer/exchange)
	Cache    Cache
	Holdings Holdings
	Router   Router // nil: no scheduler; recent parents, then the origin
	Origin   Origin
	// Transient reports whether an origin error may pass if asked again
	// (nil: registry.IsTransient).
	Transient func(error) bool
	Metrics   *Metrics // nil: counted, unregistered
	Log       *slog.Logger
	// Now is the clock the planner's expiries are read against (nil:
	// time.Now).
	Now func() time.Time
}

// Engine fetches the chunks a node misses: from parents (as the Router
// names them), then the origin, verifying, caching, recording and
// announcing every chunk before its readers count on it.
type Engine struct {
	cfg       Config
	h         host.Host
	cache     Cache
	hold      Holdings
	router    Router
	origin    Origin
	transient func(error) bool
	log       *slog.Logger
	m         *Metrics
	recent    *recent
	now       func() time.Time
	// kept counts the chunks this engine has cached and let go of
	// (keep): a fetch compares it with its reads' (group.probed).
	kept atomic.Uint64

	life context.Context // done when the engine is closed
	stop context.CancelFunc
	wg   sync.WaitGroup // fetch goroutines

	writes chan struct{} // a slot per cache write in the background

	flights flight.Group[flightKey, fetched] // flight.go

	mu     sync.Mutex
	avoid  avoidList // peers that sent bad bytes
	slow   avoidList // peers cut off for making no progress
	closed bool      // no fetch starts after Close
}

// New returns an Engine over d. Close stops it.
func New(cfg Config, d Deps) (*Engine, error) {
	if d.Host == nil || d.Cache == nil || d.Holdings == nil || d.Origin == nil {
		return nil, errors.New("fetch engine: host, cache, holdings and origin are required")
	}
	if d.Router == nil {
		d.Router = NoRouter{}
	}
	if d.Transient == nil {
		d.Transient = registry.IsTransient
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Metrics == nil {
		m, err := NewMetrics(nil)
		if err != nil {
			return nil, err
		}
		d.Metrics = m
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	life, stop := context.WithCancel(context.Background())
	e := &Engine{
		cfg: cfg, h: d.Host, cache: d.Cache, hold: d.Holdings, router: d.Router, origin: d.Origin,
		transient: d.Transient, log: d.Log, m: d.Metrics, recent: newRecent(), now: d.Now,
		life: life, stop: stop,
		writes: make(chan struct{}, maxBackgroundWrites),
		avoid:  make(avoidList),
		slow:   make(avoidList),
	}
	e.flights.SetRelease(fetched.release)
	return e, nil
}

// Close cancels the fetches in progress and waits for them to end. Reads
// after Close fail with ErrClosed. It is idempotent.
func (e *Engine) Close() {
	e.flights.Close(ErrClosed)
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool { return e.life.Err() != nil }

// Metrics returns the engine's counters.
func (e *Engine) Metrics() *Metrics { return e.m }

// Done is closed when the engine is closed.
func (e *Engine) Done() <-chan struct{} { return e.life.Done() }

// NoRouter is the Router of a node without a scheduler: every Route
// fails with route.ErrNoRoute, and there is nobody to tell anything.
type NoRouter struct{}

var _ Router = NoRouter{}

func (NoRouter) Route(context.Context, rafs.Digest, []uint32, uint64) (route.Route, error) {
	return route.Route{}, fmt.Errorf("no scheduler configured: %w", route.ErrNoRoute)
}
func (NoRouter) Announce(rafs.Digest, []uint32) {}
func (NoRouter) Drop(rafs.Digest, []uint32)     {}
func (NoRouter) Abandon(rafs.Digest, []uint32)  {}
func (NoRouter) Report(lpeer.ID, route.Outcome) {}
