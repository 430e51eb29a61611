package scheduler

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config tunes a State. Every field must be set; Default gives values
// sized for clusters of a few thousand peers.
type Config struct {
	// PeerTTL is how long a peer stays a member after its last
	// registration or heartbeat. A peer silent for longer is never
	// offered as a parent, and Expire drops it with all its holdings.
	PeerTTL time.Duration `mapstructure:"peer_ttl"`
	// MaxPeers bounds the members: a registration that would start a
	// session beyond it is refused with ErrTooManyPeers (members
	// registering again are not refused, and a peer whose TTL ran out
	// frees its place). Each member costs about 1 KiB before holdings;
	// the bound is what keeps peer IDs, which cost nothing to make,
	// from costing the scheduler without limit.
	MaxPeers int `mapstructure:"max_peers"`
	// MaxPeersPerSource bounds the members registered from one machine
	// (PeerInfo.Source, the address the transport saw), so that one
	// machine making peer IDs cannot take every place of MaxPeers.
	// Peers behind one NAT address are one machine too.
	MaxPeersPerSource int `mapstructure:"max_peers_per_source"`

	// MaxParents is the most parents one answer names.
	MaxParents int `mapstructure:"max_parents"`
	// MaxChunksPerQuery bounds the chunks of one Parents call (as the
	// chunk exchange bounds a batch).
	MaxChunksPerQuery int `mapstructure:"max_chunks_per_query"`
	// MaxChunksPerBlob bounds chunk ordinals: every ordinal must be below
	// it. It caps the size of one holding's bitset.
	MaxChunksPerBlob uint32 `mapstructure:"max_chunks_per_blob"`
	// MaxHoldingBytesPerPeer bounds the memory one peer's holdings may
	// take (bitset words plus a fixed cost per blob held), so a peer that
	// announces absurd ordinals or blobs hurts only itself.
	MaxHoldingBytesPerPeer int64 `mapstructure:"max_holding_bytes_per_peer"`
	// MaxHoldingBytes bounds the same count over all members, so that
	// MaxPeers peers each within MaxHoldingBytesPerPeer still cannot
	// make the scheduler hold more: an announcement that would take the
	// total over it fails with ErrLimit, as one over the peer's own
	// budget does.
	MaxHoldingBytes int64 `mapstructure:"max_holding_bytes"`

	// OriginFetchers (M) is the most peers fetching one chunk from the
	// origin at the same time. The others are told to wait for them.
	OriginFetchers int `mapstructure:"origin_fetchers"`
	// OriginTimeout is how long a designated fetcher has to announce the
	// chunk before its turn is given to the next peer that asks.
	OriginTimeout time.Duration `mapstructure:"origin_timeout"`
	// OriginTurnsPerPeer bounds the origin turns one peer holds at once
	// while other peers want the same blob: past it, the peer is told to
	// wait briefly (originDefer) and the turns go to the next peer that
	// asks, so the first copies of a blob's chunks reach the cluster
	// through several downlinks and are relayed from several uplinks, not
	// all from the first peer to ask. A peer alone with a blob is not
	// bounded. 0 means no bound.
	OriginTurnsPerPeer int `mapstructure:"origin_turns_per_peer"`
	// OriginTurnBytesPerPeer lets a peer past OriginTurnsPerPeer take
	// more turns while the turns it holds add up to less than this many
	// stored bytes, as its route queries give them (a query without
	// sizes is bounded by the count alone). A blob of small chunks (a
	// tree of small files) is then fetched from origin in a few large
	// ranged GETs instead of many of a few chunks each, while turns for
	// chunks of a MiB or more stay bounded by the count. 0: the count
	// alone.
	OriginTurnBytesPerPeer int64 `mapstructure:"origin_turn_bytes_per_peer"`
	// WaitRetry is the longest "ask again after" given to a waiting peer.
	WaitRetry time.Duration `mapstructure:"wait_retry"`
	// MaxWaiters bounds the peers remembered as waiting for one chunk (to
	// be woken when it is announced). Waiters beyond it still retry.
	MaxWaiters int `mapstructure:"max_waiters"`

	// LeaseTimeout is how long an assignment counts as load on its parent
	// and may be reported on, unless the requester reports it sooner.
	LeaseTimeout time.Duration `mapstructure:"lease_timeout"`
	// MaxLeasesPerPeer bounds a requester's outstanding assignments; the
	// oldest is released when a new one would exceed it.
	MaxLeasesPerPeer int `mapstructure:"max_leases_per_peer"`

	// FeedbackWeight is the weight of the newest report in the moving
	// averages of a peer's success rate and throughput, in (0, 1].
	FeedbackWeight float64 `mapstructure:"feedback_weight"`
	// RefThroughput (bytes/s) is the throughput at which a parent counts
	// as fully fast; slower parents rank lower, down to a quarter.
	RefThroughput int64 `mapstructure:"ref_throughput"`
	// Jitter is the spread of the random factor that breaks ties between
	// near-equal parents, in [0, 1): scores are multiplied by a uniform
	// value in [1-Jitter/2, 1+Jitter/2).
	Jitter float64 `mapstructure:"jitter"`
	// ParentSample bounds the holders of a blob one query looks at, for
	// blobs with many: those on the requester's host, and up to this
	// many in each of its rack, its zone, and elsewhere, visited in a
	// random order, plus any other holder of a chunk none of those holds
	// (see candidates). 0 looks at every holder.
	ParentSample int `mapstructure:"parent_sample"`

	// RefuteDuration is how long chunks a requester found missing at a
	// parent (Outcome.Missing) stay refuted: the parent's announcements
	// of them are held back until then (refute.go). An honest parent
	// that evicted a chunk answers "not found" too, and is excused when
	// it drops the chunk (it does on eviction), so this may be long.
	RefuteDuration time.Duration `mapstructure:"refute_duration"`

	// TreeMaxChildren is the most outstanding assignments a parent takes
	// before it is full: requesters of chunks only full parents hold
	// then wait for the peers already assigned them (tree.go). Small is
	// right while waiters learn of a new holder at once (held routes,
	// server/watch.go): a parent then sends each chunk to few peers at
	// full rate, and each of them relays it at once, so every uplink
	// carries a share. One is best: a parent serving one peer at a time
	// at its full uplink rate doubles a chunk's holders every transfer
	// time, where two at half rate each triple them every two (1.73x per
	// transfer time). Measured with 8 nodes pulling 64 MiB over
	// 200 Mbit/s links, in one session: 1.31x the physical bound at 1,
	// 1.53x at 2, 1.69x at 3, 1.80x at 4.
	TreeMaxChildren int `mapstructure:"tree_max_children"`
	// TreeStarveAfter is how long a requester waits for such future
	// holders of a chunk before a full parent serves it anyway. It must
	// cover the waits a whole read window can see over the slowest
	// links: shorter, and every waiter goes back to the first holder, a
	// star. 8 nodes reading 16 MiB in the same order over 20 Mbit/s
	// (0.4 s per 1 MiB chunk) fell into a star in about half the runs at
	// 3 s (11.1-17.6 s) and once at 5 s (21.7 s); at 8 s twelve runs
	// took 11.5-12.9 s, and runs at 200 Mbit/s were unchanged.
	TreeStarveAfter time.Duration `mapstructure:"tree_starve_after"`

	// BanDuration is how long a ban, and an accuser's own avoidance of
	// the peer it accused, last. Accusations are remembered as long.
	BanDuration time.Duration `mapstructure:"ban_duration"`
	// BanQuorum is how many distinct machines (PeerInfo.Source, the
	// address the transport saw, not peer IDs or labels) must accuse a
	// peer of bad bytes within BanDuration before it is banned
	// cluster-wide.
	BanQuorum int `mapstructure:"ban_quorum"`
	// AccusationBurst and AccusationRefill rate-limit bad-bytes
	// accusations per reporter: a token bucket of AccusationBurst tokens,
	// one token back every AccusationRefill.
	AccusationBurst  int           `mapstructure:"accusation_burst"`
	AccusationRefill time.Duration `mapstructure:"accusation_refill"`
}

// Default returns the default configuration.
func Default() Config {
	return Config{
		PeerTTL:                30 * time.Second,
		MaxPeers:               10000,
		MaxPeersPerSource:      256,
		MaxParents:             4,
		MaxChunksPerQuery:      1024,
		MaxChunksPerBlob:       1 << 20,
		MaxHoldingBytesPerPeer: 16 << 20,
		MaxHoldingBytes:        4 << 30,
		OriginFetchers:         1,
		OriginTimeout:          30 * time.Second,
		OriginTurnsPerPeer:     4,
		OriginTurnBytesPerPeer: 4 << 20,
		WaitRetry:              time.Second,
		MaxWaiters:             64,
		LeaseTimeout:           30 * time.Second,
		MaxLeasesPerPeer:       256,
		FeedbackWeight:         0.2,
		RefThroughput:          25 << 20,
		Jitter:                 0.1,
		ParentSample:           32,
		RefuteDuration:         time.Minute,
		TreeMaxChildren:        1,
		TreeStarveAfter:        8 * time.Second,
		BanDuration:            15 * time.Minute,
		BanQuorum:              2,
		AccusationBurst:        5,
		AccusationRefill:       12 * time.Second,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	positiveDur := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %v must be positive", name, d))
		}
	}
	positiveInt := func(name string, n int64) {
		if n <= 0 {
			errs = append(errs, fmt.Errorf("%s: %d must be positive", name, n))
		}
	}
	positiveDur("peer_ttl", c.PeerTTL)
	positiveInt("max_parents", int64(c.MaxParents))
	positiveInt("max_chunks_per_query", int64(c.MaxChunksPerQuery))
	positiveInt("max_chunks_per_blob", int64(c.MaxChunksPerBlob))
	positiveInt("max_peers", int64(c.MaxPeers))
	positiveInt("max_peers_per_source", int64(c.MaxPeersPerSource))
	positiveInt("max_holding_bytes_per_peer", c.MaxHoldingBytesPerPeer)
	positiveInt("max_holding_bytes", c.MaxHoldingBytes)
	if c.MaxHoldingBytes > 0 && c.MaxHoldingBytesPerPeer > c.MaxHoldingBytes {
		errs = append(errs, fmt.Errorf("max_holding_bytes_per_peer: %d is more than max_holding_bytes %d", c.MaxHoldingBytesPerPeer, c.MaxHoldingBytes))
	}
	positiveInt("origin_fetchers", int64(c.OriginFetchers))
	positiveDur("origin_timeout", c.OriginTimeout)
	if c.OriginTurnsPerPeer < 0 {
		errs = append(errs, fmt.Errorf("origin_turns_per_peer: %d is negative", c.OriginTurnsPerPeer))
	}
	if c.OriginTurnBytesPerPeer < 0 {
		errs = append(errs, fmt.Errorf("origin_turn_bytes_per_peer: %d is negative", c.OriginTurnBytesPerPeer))
	}
	positiveDur("wait_retry", c.WaitRetry)
	positiveInt("max_waiters", int64(c.MaxWaiters))
	positiveDur("lease_timeout", c.LeaseTimeout)
	positiveInt("max_leases_per_peer", int64(c.MaxLeasesPerPeer))
	if w := c.FeedbackWeight; math.IsNaN(w) || w <= 0 || w > 1 {
		errs = append(errs, fmt.Errorf("feedback_weight: %v is outside (0, 1]", w))
	}
	positiveInt("ref_throughput", c.RefThroughput)
	if j := c.Jitter; math.IsNaN(j) || j < 0 || j >= 1 {
		errs = append(errs, fmt.Errorf("jitter: %v is outside [0, 1)", j))
	}
	if c.ParentSample < 0 {
		errs = append(errs, fmt.Errorf("parent_sample: %d must be 0 (every holder) or positive", c.ParentSample))
	}
	positiveDur("refute_duration", c.RefuteDuration)
	positiveInt("tree_max_children", int64(c.TreeMaxChildren))
	positiveDur("tree_starve_after", c.TreeStarveAfter)
	positiveDur("ban_duration", c.BanDuration)
	positiveInt("ban_quorum", int64(c.BanQuorum))
	positiveInt("accusation_burst", int64(c.AccusationBurst))
	positiveDur("accusation_refill", c.AccusationRefill)
	return errors.Join(errs...)
}
