package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/peer/cache"
	"damselfly/peer/exchange"
	"damselfly/rafs"
	"damselfly/rafs/registry"
	"damselfly/rafs/route"
)

// Origin reads byte ranges of blobs from the origin registry; the
// upstream client (rafs/registry) is one.
type Origin interface {
	// ReadRange fills p with the bytes of blob from offset off, as ref
	// says where to find it. It fails unless p is filled whole. Safe for
	// concurrent use.
	ReadRange(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte) error
}

// StreamingOrigin is an Origin that reports a read's progress, so that
// the chunks of a range are verified while the rest arrives; the upstream
// client is one. The Node uses it, found by type assertion.
type StreamingOrigin interface {
	Origin
	// ReadRangeFunc is ReadRange that calls progress(n), on the calling
	// goroutine, each time p[:n] has grown; bytes once reported are
	// final.
	ReadRangeFunc(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte, progress func(n int)) error
}

var _ StreamingOrigin = (*registry.Client)(nil)

// ErrClosed is returned by reads of a Node that was closed.
var ErrClosed = errors.New("peer: node closed")

// Node is the peer's chunk source: it serves chunks from the node cache,
// other peers (as the Router names them) and the origin, in that order,
// verifying, caching and announcing every chunk it fetches. It implements
// proxy.ChunkSource.
type Node struct {
	cfg       NodeConfig
	h         host.Host
	cache     *cache.Cache
	router    Router
	origin    Origin
	transient func(error) bool
	log       *slog.Logger
	m         *metrics
	hold      *holdings
	recent    *recent
	plain     *plainState
	tables    *exchange.TableServer

	life context.Context // done when the node is closed
	stop context.CancelFunc
	wg   sync.WaitGroup // fetch goroutines

	writes chan struct{} // a slot per cache write in the background

	mu      sync.Mutex
	flights map[flightKey]*flight
	avoid   map[lpeer.ID]time.Time // peers that sent bad bytes
	slow    map[lpeer.ID]time.Time // peers cut off for making no progress
	closed  bool
}

// NewNode returns a Node that fetches over h and keeps chunks in c. r may
// be nil: the node then uses no scheduler and goes to peers it learnt of
// (none) and the origin. The origin's errors are retried while
// registry.IsTransient says they are transient. log may be nil. It loads
// the holdings under cfg.HoldingsDir; Run announces them.
func NewNode(cfg NodeConfig, h host.Host, c *cache.Cache, r Router, origin Origin, log *slog.Logger) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("peer node config: %w", err)
	}
	if h == nil || c == nil || origin == nil {
		return nil, errors.New("peer node: host, cache and origin are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if r == nil {
		r = noRouter{}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("peer node metrics: %w", err)
	}
	hold := newHoldings(cfg.HoldingsDir, log)
	if err := hold.load(); err != nil {
		return nil, err
	}
	plain := newPlainState(newTableStore(cfg.HoldingsDir, log))
	tables, err := plain.store.load()
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		plain.add(t, false)
	}
	life, stop := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, h: h, cache: c, router: r, origin: pieceOrigin{origin, plain},
		transient: registry.IsTransient,
		log:       log, m: m, hold: hold, recent: newRecent(),
		life: life, stop: stop,
		writes:  make(chan struct{}, maxBackgroundWrites),
		flights: make(map[flightKey]*flight),
		avoid:   make(map[lpeer.ID]time.Time),
		slow:    make(map[lpeer.ID]time.Time),
		plain:   plain,
	}
	n.tables = exchange.NewTableServer(h, n.plain.lookup, log.With("part", "piecetable"))
	c.SetEvictHook(n.evicted)
	return n, nil
}

// Run announces the chunks the node still holds from before, then keeps
// the holdings in line with the cache: every HoldingsCheckInterval it
// drops (and tells the Router of) chunks that were evicted, and it writes
// changed holdings to HoldingsDir. It returns nil when ctx is done or the
// node is closed, after a last write.
func (n *Node) Run(ctx context.Context) error {
	n.checkHoldings(true)
	check := time.NewTicker(n.cfg.HoldingsCheckInterval)
	defer check.Stop()
	flush := time.NewTicker(n.cfg.HoldingsFlushInterval)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return n.flushHoldings()
		case <-n.life.Done():
			return n.flushHoldings()
		case <-check.C:
			n.checkHoldings(false)
		case <-flush.C:
			_ = n.flushHoldings()
		}
	}
}

// checkHoldings drops evicted chunks from the holdings and tells the
// Router; with announce it also announces everything still held.
func (n *Node) checkHoldings(announce bool) {
	n.dropHoldings(n.hold.check(n.cache.Has))
	if !announce {
		return
	}
	for blob, hs := range n.hold.snapshot() {
		ords := make([]uint32, len(hs))
		for i, h := range hs {
			ords[i] = h.Ordinal
		}
		n.router.Announce(blob, ords)
	}
}

func (n *Node) flushHoldings() error {
	if err := n.hold.flush(); err != nil {
		n.log.Warn("writing holdings", "err", err)
		return err
	}
	return nil
}

// Close cancels the fetches in progress, waits for them to end and writes
// the holdings. Reads after Close fail with ErrClosed. It is idempotent.
func (n *Node) Close() error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.stop()
	n.tables.Close()
	n.wg.Wait()
	n.cache.SetEvictHook(nil)
	return n.flushHoldings()
}

// Stats returns the node's counters. Safe for concurrent use.
func (n *Node) Stats() Stats { return n.m.stats() }

// avoided reports whether this node avoids p for having sent bad bytes.
func (n *Node) avoided(p lpeer.ID) bool { return n.isAvoided(n.avoid, p) }

// slowAvoided reports whether this node avoids p for having stalled.
func (n *Node) slowAvoided(p lpeer.ID) bool { return n.isAvoided(n.slow, p) }

// avoidPeer stops this node asking p for AvoidDuration.
func (n *Node) avoidPeer(p lpeer.ID) { n.avoidIn(n.avoid, p, n.cfg.AvoidDuration) }

// avoidSlow stops this node asking p for SlowAvoidDuration.
func (n *Node) avoidSlow(p lpeer.ID) { n.avoidIn(n.slow, p, n.cfg.SlowAvoidDuration) }

func (n *Node) isAvoided(m map[lpeer.ID]time.Time, p lpeer.ID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	until, ok := m[p]
	if ok && time.Now().After(until) {
		delete(m, p)
		return false
	}
	return ok
}

func (n *Node) avoidIn(m map[lpeer.ID]time.Time, p lpeer.ID, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	const maxAvoided = 4096
	if len(m) >= maxAvoided {
		now := time.Now()
		for id, until := range m {
			if now.After(until) {
				delete(m, id)
			}
		}
	}
	if len(m) < maxAvoided {
		m[p] = time.Now().Add(d)
	}
}

// noRouter is the Router of a node without a scheduler.
type noRouter struct{}

func (noRouter) Route(context.Context, rafs.Digest, []uint32) (route.Route, error) {
	return route.Route{}, fmt.Errorf("no scheduler configured: %w", route.ErrNoRoute)
}
func (noRouter) Announce(rafs.Digest, []uint32) {}
func (noRouter) Drop(rafs.Digest, []uint32)     {}
func (noRouter) Abandon(rafs.Digest, []uint32)  {}
func (noRouter) Report(lpeer.ID, route.Outcome) {}
