package server

import (
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"damselfly/configs/field"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// Config configures a scheduler server. Keys (mapstructure tags) are the
// ones of configs/scheduler.yaml, beside the libp2p host's (host:, which
// the daemon's assembly in cmd/damselfly reads and builds): the admin API
// is set by operators; fields tagged config:"advanced" are tunables whose defaults
// need no touching, read from the file's advanced: section
// (advanced.state.peer_ttl, advanced.stream_timeout, ...).
type Config struct {
	// Admin is the loopback admin HTTP API.
	Admin AdminConfig `mapstructure:"admin"`
	// State tunes the scheduler core (see scheduler.Config).
	State scheduler.Config `mapstructure:"state" config:"advanced"`
	// ExpireInterval is how often members silent for State.PeerTTL are
	// dropped, along with timed-out leases and origin turns.
	ExpireInterval time.Duration `mapstructure:"expire_interval" config:"advanced"`
	// StreamTimeout bounds one stream: reading the request, answering it
	// and writing the answer.
	StreamTimeout time.Duration `mapstructure:"stream_timeout" config:"advanced"`
	// MaxStreamsPerPeer bounds the streams one peer may have open at once;
	// more are answered "rate limited".
	MaxStreamsPerPeer int `mapstructure:"max_streams_per_peer" config:"advanced"`
	// MaxStreams bounds the streams open at once over all peers.
	MaxStreams int `mapstructure:"max_streams" config:"advanced"`
	// RequestsPerPeer bounds the requests one peer may send a second, on
	// average over RequestBurstPerPeer requests (a token bucket per peer);
	// more are answered "rate limited" without being acted on. It keeps
	// one peer (a broken one, or one looping on the same question) from
	// taking the scheduler from the others. Heartbeats are not counted:
	// a peer slowed down must not be dropped for missing them. 0 means
	// no bound.
	RequestsPerPeer float64 `mapstructure:"requests_per_peer" config:"advanced"`
	// RequestBurstPerPeer is the bucket's size: the requests a peer that
	// was quiet may send at once, at least 1.
	RequestBurstPerPeer int `mapstructure:"request_burst_per_peer" config:"advanced"`
}

// AdminConfig is the admin HTTP API's part of Config.
type AdminConfig struct {
	// Listen is the admin API's TCP address. It must be a loopback address
	// unless AllowRemote is set: the API can ban peers and has no
	// authentication of its own.
	Listen string `mapstructure:"listen"`
	// AllowRemote permits a Listen address that is not loopback (the
	// peer's proxy.allow_remote means the same).
	AllowRemote bool `mapstructure:"allow_remote"`
}

// DefaultRequestsPerPeer is the default of Config.RequestsPerPeer: far
// above what a reading peer sends (about two requests per chunk it
// fetches: 97 a second per node in the eight-node cluster test), and a
// fifth of what one scheduler answers on two cores.
const DefaultRequestsPerPeer = 10000

// DefaultListenAddr is the scheduler's default libp2p address (the host
// config's listen_addrs): not the peer's, so both can run on one machine.
const DefaultListenAddr = "/ip4/0.0.0.0/tcp/7945"

// DefaultAdminListen is the admin API's default address.
const DefaultAdminListen = "127.0.0.1:7947"

// DefaultRequestBurstPerPeer is the default of Config.RequestBurstPerPeer:
// two seconds of DefaultRequestsPerPeer.
const DefaultRequestBurstPerPeer = 2 * DefaultRequestsPerPeer

// Default returns the production configuration.
func Default() Config {
	return Config{
		Admin:               AdminConfig{Listen: DefaultAdminListen},
		State:               scheduler.Default(),
		ExpireInterval:      time.Second,
		StreamTimeout:       10 * time.Second,
		MaxStreamsPerPeer:   16,
		MaxStreams:          4096,
		RequestsPerPeer:     DefaultRequestsPerPeer,
		RequestBurstPerPeer: DefaultRequestBurstPerPeer,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Admin.validate(); err != nil {
		errs = append(errs, err)
	}
	core := c.State
	errs = append(errs, field.In("state", core.Validate()))
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
	if c.RequestBurstPerPeer < 1 {
		errs = append(errs, fmt.Errorf("request_burst_per_peer: %d must be positive", c.RequestBurstPerPeer))
	}
	return errors.Join(errs...)
}

func (a AdminConfig) validate() error {
	h, _, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen: %q: %w", a.Listen, err)
	}
	if a.AllowRemote || h == "localhost" {
		return nil
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("admin.listen: %q is not a loopback address (set admin.allow_remote to serve the unauthenticated admin API beyond this host)", a.Listen)
	}
	return nil
}
