package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/host"

	"damselfly/peer/fetch"
	"damselfly/peer/plain"
	"damselfly/rafs/cache"
)

// Node is the peer's chunk source: it serves chunks from the node cache,
// other peers (as the Router names them) and the origin, in that order,
// verifying, caching and announcing every chunk it fetches. It implements
// proxy.ChunkSource.
type Node struct {
	cfg    NodeConfig
	h      host.Host
	cache  *cache.Cache
	router fetch.Router
	log    *slog.Logger
	m      *fetch.Metrics
	hold   *holdings
	plain  *plain.Source
	eng    *fetch.Engine
}

// NewNode returns a Node that fetches over h and keeps chunks in c. r may
// be nil: the node then uses no scheduler and goes to peers it learnt of
// (none) and the origin. The origin's errors are retried while
// registry.IsTransient says they are transient. log may be nil. It loads
// the holdings under cfg.HoldingsDir; Run announces them.
func NewNode(cfg NodeConfig, h host.Host, c *cache.Cache, r fetch.Router, origin fetch.Origin, log *slog.Logger) (*Node, error) {
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
		r = fetch.NoRouter{}
	}
	m, err := fetch.NewMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("peer node metrics: %w", err)
	}
	hold := newHoldings(cfg.HoldingsDir, log)
	if err := hold.load(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, h: h, cache: c, router: r, log: log, m: m, hold: hold}
	n.eng, err = fetch.New(cfg.engine(), fetch.Deps{
		Host: h, Cache: c, Holdings: n, Router: r, Origin: origin,
		Metrics: m, Log: log,
	})
	if err != nil {
		return nil, err
	}
	// A registry client can say a blob's size before its bytes: with it,
	// nodes pulling a plain blob at once share its pieces as they land.
	live, _ := origin.(plain.Origin)
	n.plain, err = plain.New(plain.Config{
		PieceSize: cfg.PieceSize, Dir: cfg.HoldingsDir,
		FetchDeadline: cfg.FetchDeadline, OriginMaxRange: cfg.OriginMaxRange, ParentTimeout: cfg.ParentTimeout,
	}, plain.Deps{
		Engine: n.eng, Host: h, Cache: c, Router: r, Holdings: n, Metrics: m, Log: log, Origin: live,
	})
	if err != nil {
		n.eng.Close()
		return nil, err
	}
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
		case <-n.eng.Done():
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
// the holdings. Reads after Close fail with fetch.ErrClosed. It is
// idempotent.
func (n *Node) Close() error {
	n.plain.Close()
	n.eng.Close()
	n.cache.SetEvictHook(nil)
	return n.flushHoldings()
}

// Plain returns the node's source of plain blobs for the mirror
// (proxy.BlobSource).
func (n *Node) Plain() *plain.Source { return n.plain }

// Stats returns the node's counters. Safe for concurrent use.
func (n *Node) Stats() Stats { return n.m.Stats() }

// Stats counts a Node's work since it started.
type Stats = fetch.Stats

// engine is the fetch engine's part of c.
func (c NodeConfig) engine() fetch.Config {
	return fetch.Config{
		FetchDeadline:      c.FetchDeadline,
		RouteTimeout:       c.RouteTimeout,
		ParentTimeout:      c.ParentTimeout,
		HedgeDelay:         c.HedgeDelay,
		AvoidDuration:      c.AvoidDuration,
		SlowAvoidDuration:  c.SlowAvoidDuration,
		MaxParallelParents: c.MaxParallelParents,
		OriginMaxRange:     c.OriginMaxRange,
		MaxParallelOrigin:  c.MaxParallelOrigin,
		MaxRetryDelay:      c.MaxRetryDelay,
	}
}
