package peer

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"damselfly/rafs/piece"
)

// NodeConfig configures a Node. Default gives every field a working
// value; Validate checks them.
type NodeConfig struct {
	// FetchDeadline is how long chunks that nobody can serve (no peer
	// holds them and the origin fails transiently) are retried, counted
	// from the last chunk of the batch that arrived, before the read
	// fails.
	FetchDeadline time.Duration `mapstructure:"fetch_deadline"`
	// RouteTimeout bounds one question to the Router; after it the node
	// uses the parents it learnt recently and the origin.
	RouteTimeout time.Duration `mapstructure:"route_timeout"`
	// ParentTimeout bounds one chunk exchange with one parent. A parent
	// whose exchange runs out of it (or that makes no progress for
	// exchange.ReadIdleTimeout) is cut off, reported, and not asked by
	// this node for SlowAvoidDuration: its chunks go to other parents or
	// the origin.
	ParentTimeout time.Duration `mapstructure:"parent_timeout"`
	// HedgeDelay is how long a parent may go without delivering a chunk
	// (from the request, then from its last chunk) before the chunks it
	// has not delivered yet are asked for a second time: from another
	// parent the Router names (the first one's assignment counts as load
	// on it, so another holder ranks higher), or from the origin when it
	// is this node's turn. The first copy of each chunk to arrive and
	// verify is used and the slower request is cancelled. A chunk of
	// 1 MiB takes about 40 ms over 200 Mbit/s, so the default of 1 s is
	// well past the time a healthy parent needs. 0 turns hedging off.
	HedgeDelay time.Duration `mapstructure:"hedge_delay"`
	// SlowAvoidDuration is how long this node does not ask a parent that
	// was cut off for making no progress; it is shorter than
	// AvoidDuration because an overloaded peer is not a hostile one.
	SlowAvoidDuration time.Duration `mapstructure:"slow_avoid_duration"`
	// MaxParallelParents is how many parents one batch fetches from at
	// once.
	MaxParallelParents int `mapstructure:"max_parallel_parents"`
	// OriginMaxRange is the most bytes one ranged GET to the origin asks
	// for: adjacent chunks are merged into one request up to it.
	OriginMaxRange int64 `mapstructure:"origin_max_range"`
	// MaxParallelOrigin is how many origin requests one batch has in
	// flight at once.
	MaxParallelOrigin int `mapstructure:"max_parallel_origin"`
	// MaxRetryDelay caps the wait between two rounds of a batch: the
	// backoff after a failed round and a Router's "ask again after".
	MaxRetryDelay time.Duration `mapstructure:"max_retry_delay"`
	// AvoidDuration is how long this node does not ask a peer that sent
	// bad bytes again.
	AvoidDuration time.Duration `mapstructure:"avoid_duration"`
	// HoldingsDir keeps, per blob, the chunks this node holds, so that it
	// can announce them after a restart. Empty keeps them in memory only.
	HoldingsDir string `mapstructure:"holdings_dir"`
	// HoldingsCheckInterval is how often the holdings are checked against
	// the cache, dropping (and announcing the drop of) evicted chunks.
	HoldingsCheckInterval time.Duration `mapstructure:"holdings_check_interval"`
	// HoldingsFlushInterval is how often changed holdings are written to
	// HoldingsDir.
	HoldingsFlushInterval time.Duration `mapstructure:"holdings_flush_interval"`
	// PieceSize is the size of the pieces that plain (non-RAFS) blobs
	// read through the mirror are cut into when this node is the first
	// to read them from the origin (peer/PROTOCOL.md), 64 KiB to 16 MiB.
	PieceSize int64 `mapstructure:"piece_size"`
	// Registerer receives the node's metrics; nil keeps them unregistered
	// (Stats still works).
	Registerer prometheus.Registerer `mapstructure:"-"`
}

// DefaultNode returns the default NodeConfig, with holdings in memory
// only.
func DefaultNode() NodeConfig {
	return NodeConfig{
		FetchDeadline:         30 * time.Second,
		RouteTimeout:          2 * time.Second,
		ParentTimeout:         30 * time.Second,
		HedgeDelay:            time.Second,
		SlowAvoidDuration:     time.Minute,
		MaxParallelParents:    4,
		OriginMaxRange:        4 << 20,
		MaxParallelOrigin:     4,
		MaxRetryDelay:         2 * time.Second,
		AvoidDuration:         15 * time.Minute,
		HoldingsCheckInterval: 30 * time.Second,
		HoldingsFlushInterval: time.Second,
		PieceSize:             piece.DefaultSize,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c NodeConfig) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %v must be positive", name, d))
		}
	}
	pos("fetch_deadline", c.FetchDeadline)
	pos("route_timeout", c.RouteTimeout)
	pos("parent_timeout", c.ParentTimeout)
	pos("max_retry_delay", c.MaxRetryDelay)
	pos("avoid_duration", c.AvoidDuration)
	pos("slow_avoid_duration", c.SlowAvoidDuration)
	if c.HedgeDelay < 0 {
		errs = append(errs, fmt.Errorf("hedge_delay: %v is negative (0 turns hedging off)", c.HedgeDelay))
	}
	pos("holdings_check_interval", c.HoldingsCheckInterval)
	pos("holdings_flush_interval", c.HoldingsFlushInterval)
	if c.MaxParallelParents < 1 || c.MaxParallelParents > 64 {
		errs = append(errs, fmt.Errorf("max_parallel_parents: %d is not in [1, 64]", c.MaxParallelParents))
	}
	if c.MaxParallelOrigin < 1 || c.MaxParallelOrigin > 64 {
		errs = append(errs, fmt.Errorf("max_parallel_origin: %d is not in [1, 64]", c.MaxParallelOrigin))
	}
	if c.OriginMaxRange < 1<<10 || c.OriginMaxRange > 1<<30 {
		errs = append(errs, fmt.Errorf("origin_max_range: %d is not in [1 KiB, 1 GiB]", c.OriginMaxRange))
	}
	if c.PieceSize < piece.MinSize || c.PieceSize > piece.MaxSize {
		errs = append(errs, fmt.Errorf("piece_size: %d is not in [%d, %d]", c.PieceSize, piece.MinSize, piece.MaxSize))
	}
	return errors.Join(errs...)
}
