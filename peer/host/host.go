package host

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/transport"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// Host is a running libp2p host. It is a host.Host (pass it to anything
// that takes one); Close stops it.
type Host struct {
	host.Host
	log *slog.Logger
}

// New validates cfg, loads (or on first start creates) the identity, loads
// the cluster key and starts a host listening on cfg.ListenAddrs. ctx only
// bounds the setup; the host runs until Close. log may be nil.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Host, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("host config: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, err := loadOrCreateIdentity(cfg.IdentityFile)
	if err != nil {
		return nil, fmt.Errorf("identity_file: %w", err)
	}
	// SO_REUSEPORT stays off (libp2p turns it on to dial from the listen
	// port, for NAT traversal, which a cluster does not need): with it, a
	// second daemon on the same port would silently share the first one's
	// connections instead of failing to start.
	opts := []libp2p.Option{
		libp2p.Identity(id),
		// Listening starts after the host is built (below): libp2p.New
		// leaks goroutines when a listen fails inside it.
		libp2p.NoListenAddrs,
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.WithDialTimeout(cfg.DialTimeout),
		libp2p.DisableRelay(),
	}
	plainSecurity := func() libp2p.Option {
		if cfg.Security == SecurityNoise {
			return libp2p.Security(noise.ID, noise.New)
		}
		return libp2p.Security(libp2ptls.ID, libp2ptls.New)
	}
	if cfg.InsecureOpenCluster {
		log.Warn("host: insecure open cluster: any peer that reaches the port may connect")
		opts = append(opts, plainSecurity(), libp2p.Transport(tcp.NewTCPTransport, tcp.DisableReuseport()))
	} else {
		psk, err := loadClusterKey(cfg.ClusterKeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster_key_file: %w", err)
		}
		other := ClusterAuthPrivateNetwork
		if cfg.ClusterAuth == ClusterAuthPrivateNetwork {
			other = ClusterAuthProof
		}
		key, alt := deriveKnockKeyFor(psk, cfg.ClusterAuth), deriveKnockKeyFor(psk, other)
		newTCP := func(up transport.Upgrader, rm network.ResourceManager) (*tcp.TcpTransport, error) {
			ku := &knockUpgrader{Upgrader: up, key: key, alt: alt, altAuth: other, timeout: cfg.DialTimeout, log: log}
			return tcp.NewTCPTransport(ku, rm, nil, tcp.DisableReuseport())
		}
		opts = append(opts, libp2p.Transport(newTCP))
		if cfg.ClusterAuth == ClusterAuthPrivateNetwork {
			opts = append(opts, plainSecurity(), libp2p.PrivateNetwork(psk))
		} else {
			opts = append(opts, libp2p.Security(proofSecurity(cfg.Security, psk, cfg.DialTimeout)))
		}
	}
	if len(cfg.AnnounceAddrs) > 0 {
		announce := make([]ma.Multiaddr, len(cfg.AnnounceAddrs))
		for i, s := range cfg.AnnounceAddrs {
			announce[i] = ma.StringCast(s) // checked by Validate
		}
		opts = append(opts, libp2p.AddrsFactory(func([]ma.Multiaddr) []ma.Multiaddr { return announce }))
	}
	if cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(cfg.Registerer))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	limitOpts, err := limitOptions(cfg)
	if err != nil {
		return nil, err
	}
	h, err := libp2p.New(append(opts, limitOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("start libp2p host: %w", err)
	}
	// One at a time: libp2p's Listen succeeds if any address works, and
	// an address the operator configured but the host does not serve is
	// a surprise better found at start.
	for i, s := range cfg.ListenAddrs {
		if err := h.Network().Listen(ma.StringCast(s)); err != nil { // parsed by Validate
			h.Close()
			return nil, fmt.Errorf("listen_addrs[%d]: %w", i, err)
		}
	}
	log.Info("host: started", "peer", h.ID(), "addrs", h.Addrs(), "open_cluster", cfg.InsecureOpenCluster, "security", cfg.Security, "cluster_auth", cfg.ClusterAuth)
	return &Host{Host: h, log: log}, nil
}

// limitOptions gives the resource manager (hard limits) and the connection
// manager (trims idle connections before the hard limit is reached).
func limitOptions(cfg Config) ([]libp2p.Option, error) {
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	n, perPeer := rcmgr.LimitVal(cfg.MaxConns), rcmgr.LimitVal(cfg.MaxConnsPerPeer)
	partial := rcmgr.PartialLimitConfig{
		System:      rcmgr.ResourceLimits{Conns: n, ConnsInbound: n, ConnsOutbound: n},
		PeerDefault: rcmgr.ResourceLimits{Conns: perPeer, ConnsInbound: perPeer, ConnsOutbound: perPeer},
	}
	var rmOpts []rcmgr.Option
	if !cfg.ResourceMetrics || cfg.Registerer == nil {
		rmOpts = append(rmOpts, rcmgr.WithMetricsDisabled())
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(partial.Build(scaling.AutoScale())), rmOpts...)
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	high := max(cfg.MaxConns*9/10, 1)
	cm, err := connmgr.NewConnManager(max(cfg.MaxConns/2, 1), high, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("connection manager: %w", err)
	}
	return []libp2p.Option{libp2p.ResourceManager(rm), libp2p.ConnectionManager(cm)}, nil
}

// AddrInfo returns the host's peer ID and addresses, as another peer needs
// them to connect.
func (h *Host) AddrInfo() peer.AddrInfo {
	return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
}

// Close stops the host: listeners, connections and every background task.
func (h *Host) Close() error {
	err := h.Host.Close()
	h.log.Info("host: stopped", "peer", h.ID())
	return err
}

var _ host.Host = (*Host)(nil)
