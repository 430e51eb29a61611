package server

import (
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"damselfly/peer/host"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// Config configures a scheduler daemon. Keys (mapstructure tags) are the
// ones of configs/scheduler.yaml.
type Config struct {
	Host  HostConfig  `mapstructure:"host" yaml:"host"`
	Admin AdminConfig `mapstructure:"admin" yaml:"admin"`
	State StateConfig `mapstructure:"state" yaml:"state"`
	// ExpireInterval is how often members silent for State.PeerTTL are
	// dropped, along with timed-out leases and origin turns.
	ExpireInterval time.Duration `mapstructure:"expire_interval" yaml:"expire_interval"`
	// StreamTimeout bounds one stream: reading the request, answering it
	// and writing the answer.
	StreamTimeout time.Duration `mapstructure:"stream_timeout" yaml:"stream_timeout"`
	// MaxStreamsPerPeer bounds the streams one peer may have open at once;
	// more are answered "rate limited".
	MaxStreamsPerPeer int `mapstructure:"max_streams_per_peer" yaml:"max_streams_per_peer"`
	// MaxStreams bounds the streams open at once over all peers.
	MaxStreams int `mapstructure:"max_streams" yaml:"max_streams"`
	// RequestsPerPeer bounds the requests one peer may send a second, on
	// average over RequestBurstPerPeer requests (a token bucket per peer);
	// more are answered "rate limited" without being acted on. It keeps
	// one peer (a broken one, or one looping on the same question) from
	// taking the scheduler from the others. Heartbeats are not counted:
	// a peer slowed down must not be dropped for missing them. 0 means
	// no bound.
	RequestsPerPeer float64 `mapstructure:"requests_per_peer" yaml:"requests_per_peer"`
	// RequestBurstPerPeer is the bucket's size: the requests a peer that
	// was quiet may send at once. 0 means twice RequestsPerPeer.
	RequestBurstPerPeer int `mapstructure:"request_burst_per_peer" yaml:"request_burst_per_peer"`
}

// burst is the token bucket's size, RequestBurstPerPeer or its default.
func (c Config) burst() int {
	if c.RequestBurstPerPeer > 0 {
		return c.RequestBurstPerPeer
	}
	return max(1, int(2*c.RequestsPerPeer))
}

// HostConfig is the libp2p host's part of Config (see peer/host.Config).
type HostConfig struct {
	IdentityFile        string   `mapstructure:"identity_file" yaml:"identity_file"`
	ListenAddrs         []string `mapstructure:"listen_addrs" yaml:"listen_addrs"`
	AnnounceAddrs       []string `mapstructure:"announce_addrs" yaml:"announce_addrs"`
	ClusterKeyFile      string   `mapstructure:"cluster_key_file" yaml:"cluster_key_file"`
	InsecureOpenCluster bool     `mapstructure:"insecure_open_cluster" yaml:"insecure_open_cluster"`
	Security            string   `mapstructure:"security" yaml:"security"`
	ClusterAuth         string   `mapstructure:"cluster_auth" yaml:"cluster_auth"`
}

// AdminConfig is the admin HTTP API's part of Config.
type AdminConfig struct {
	// Listen is the admin API's TCP address. It must be a loopback address
	// unless AllowNonLoopback is set: the API can ban peers and has no
	// authentication of its own.
	Listen           string `mapstructure:"listen" yaml:"listen"`
	AllowNonLoopback bool   `mapstructure:"allow_non_loopback" yaml:"allow_non_loopback"`
}

// StateConfig is scheduler.Config with configuration keys; see the core's
// documentation of each field.
type StateConfig struct {
	PeerTTL                time.Duration `mapstructure:"peer_ttl" yaml:"peer_ttl"`
	MaxPeers               int           `mapstructure:"max_peers" yaml:"max_peers"`
	MaxPeersPerSource      int           `mapstructure:"max_peers_per_source" yaml:"max_peers_per_source"`
	MaxParents             int           `mapstructure:"max_parents" yaml:"max_parents"`
	MaxChunksPerQuery      int           `mapstructure:"max_chunks_per_query" yaml:"max_chunks_per_query"`
	MaxChunksPerBlob       uint32        `mapstructure:"max_chunks_per_blob" yaml:"max_chunks_per_blob"`
	MaxHoldingBytesPerPeer int64         `mapstructure:"max_holding_bytes_per_peer" yaml:"max_holding_bytes_per_peer"`
	MaxHoldingBytes        int64         `mapstructure:"max_holding_bytes" yaml:"max_holding_bytes"`
	OriginFetchers         int           `mapstructure:"origin_fetchers" yaml:"origin_fetchers"`
	OriginTimeout          time.Duration `mapstructure:"origin_timeout" yaml:"origin_timeout"`
	OriginTurnsPerPeer     int           `mapstructure:"origin_turns_per_peer" yaml:"origin_turns_per_peer"`
	WaitRetry              time.Duration `mapstructure:"wait_retry" yaml:"wait_retry"`
	MaxWaiters             int           `mapstructure:"max_waiters" yaml:"max_waiters"`
	LeaseTimeout           time.Duration `mapstructure:"lease_timeout" yaml:"lease_timeout"`
	MaxLeasesPerPeer       int           `mapstructure:"max_leases_per_peer" yaml:"max_leases_per_peer"`
	FeedbackWeight         float64       `mapstructure:"feedback_weight" yaml:"feedback_weight"`
	RefThroughput          int64         `mapstructure:"ref_throughput" yaml:"ref_throughput"`
	Jitter                 float64       `mapstructure:"jitter" yaml:"jitter"`
	ParentSample           int           `mapstructure:"parent_sample" yaml:"parent_sample"`
	RefuteDuration         time.Duration `mapstructure:"refute_duration" yaml:"refute_duration"`
	TreeMaxChildren        int           `mapstructure:"tree_max_children" yaml:"tree_max_children"`
	TreeStarveAfter        time.Duration `mapstructure:"tree_starve_after" yaml:"tree_starve_after"`
	BanDuration            time.Duration `mapstructure:"ban_duration" yaml:"ban_duration"`
	BanQuorum              int           `mapstructure:"ban_quorum" yaml:"ban_quorum"`
	AccusationBurst        int           `mapstructure:"accusation_burst" yaml:"accusation_burst"`
	AccusationRefill       time.Duration `mapstructure:"accusation_refill" yaml:"accusation_refill"`
}

// DefaultRequestsPerPeer is the default of Config.RequestsPerPeer: far
// above what a reading peer sends (about two requests per chunk it
// fetches: 97 a second per node in the eight-node cluster test), and a
// fifth of what one scheduler answers on two cores.
const DefaultRequestsPerPeer = 10000

// DefaultListenAddr is the scheduler's default libp2p address: not the
// peer's (peer/host.DefaultListenAddr), so both can run on one machine.
const DefaultListenAddr = "/ip4/0.0.0.0/tcp/7945"

// DefaultAdminListen is the admin API's default address.
const DefaultAdminListen = "127.0.0.1:7947"

// Default returns the production configuration for a scheduler whose
// state (identity, cluster key) lives in dir.
func Default(dir string) Config {
	hc := host.Default(dir)
	return Config{
		Host: HostConfig{
			IdentityFile:   hc.IdentityFile,
			ListenAddrs:    []string{DefaultListenAddr},
			ClusterKeyFile: hc.ClusterKeyFile,
		},
		Admin:             AdminConfig{Listen: DefaultAdminListen},
		State:             FromCore(scheduler.Default()),
		ExpireInterval:    time.Second,
		StreamTimeout:     10 * time.Second,
		MaxStreamsPerPeer: 16,
		MaxStreams:        4096,
		RequestsPerPeer:   DefaultRequestsPerPeer,
	}
}

// FromCore returns c with configuration keys.
func FromCore(c scheduler.Config) StateConfig {
	return StateConfig(c)
}

// Core returns the scheduler core's configuration.
func (c StateConfig) Core() scheduler.Config {
	return scheduler.Config(c)
}

// HostConfig returns the libp2p host's configuration.
func (c HostConfig) HostConfig() host.Config {
	return host.Config{
		IdentityFile:        c.IdentityFile,
		ListenAddrs:         c.ListenAddrs,
		AnnounceAddrs:       c.AnnounceAddrs,
		ClusterKeyFile:      c.ClusterKeyFile,
		InsecureOpenCluster: c.InsecureOpenCluster,
		Security:            c.Security,
		ClusterAuth:         c.ClusterAuth,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Host.HostConfig().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("host: %w", err))
	}
	if err := c.Admin.validate(); err != nil {
		errs = append(errs, err)
	}
	core := c.State.Core()
	if err := core.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("state: %w", err))
	}
	if core.MaxParents > wire.MaxParents {
		errs = append(errs, fmt.Errorf("state.max_parents: %d is more than the protocol's %d", core.MaxParents, wire.MaxParents))
	}
	if core.MaxChunksPerQuery > wire.MaxOrdinals {
		errs = append(errs, fmt.Errorf("state.max_chunks_per_query: %d is more than the protocol's %d", core.MaxChunksPerQuery, wire.MaxOrdinals))
	}
	if core.MaxChunksPerBlob > wire.MaxBitsetWords*64 {
		errs = append(errs, fmt.Errorf("state.max_chunks_per_blob: %d is more than the protocol's %d", core.MaxChunksPerBlob, wire.MaxBitsetWords*64))
	}
	if c.ExpireInterval <= 0 {
		errs = append(errs, fmt.Errorf("expire_interval: %v must be positive", c.ExpireInterval))
	}
	if c.StreamTimeout <= 0 {
		errs = append(errs, fmt.Errorf("stream_timeout: %v must be positive", c.StreamTimeout))
	}
	if c.MaxStreamsPerPeer <= 0 {
		errs = append(errs, fmt.Errorf("max_streams_per_peer: %d must be positive", c.MaxStreamsPerPeer))
	}
	if c.MaxStreams <= 0 {
		errs = append(errs, fmt.Errorf("max_streams: %d must be positive", c.MaxStreams))
	}
	if math.IsNaN(c.RequestsPerPeer) || math.IsInf(c.RequestsPerPeer, 0) || c.RequestsPerPeer < 0 {
		errs = append(errs, fmt.Errorf("requests_per_peer: %v must be 0 (no bound) or positive", c.RequestsPerPeer))
	}
	if c.RequestBurstPerPeer < 0 {
		errs = append(errs, fmt.Errorf("request_burst_per_peer: %d must not be negative", c.RequestBurstPerPeer))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("scheduler server config: %w", err)
	}
	return nil
}

func (a AdminConfig) validate() error {
	h, _, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen: %q: %w", a.Listen, err)
	}
	if a.AllowNonLoopback || h == "localhost" {
		return nil
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("admin.listen: %q is not a loopback address (set admin.allow_non_loopback to serve the unauthenticated admin API beyond this host)", a.Listen)
	}
	return nil
}
