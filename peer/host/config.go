package host

import (
	"errors"
	"fmt"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config (Default).
const (
	DefaultListenAddr      = "/ip4/0.0.0.0/tcp/7946"
	DefaultMaxConns        = 1024
	DefaultMaxConnsPerPeer = 8
	DefaultDialTimeout     = 10 * time.Second
)

// Security protocols for Config.Security.
const (
	SecurityNoise = "noise"
	SecurityTLS   = "tls"
)

// How a keyed host keeps peers without the cluster key out, for
// Config.ClusterAuth.
const (
	// ClusterAuthProof: after the security handshake each side proves it
	// holds the key in a MAC bound to both peer IDs (proof.go). Traffic
	// is encrypted once, by TLS or Noise.
	ClusterAuthProof = "proof"
	// ClusterAuthPrivateNetwork: libp2p's private network, a stream
	// cipher keyed by the cluster key under the security protocol, so
	// traffic is encrypted twice.
	ClusterAuthPrivateNetwork = "pnet"
)

// Config configures a host. Start from Default: a zero field means zero
// and Validate refuses it where that makes no sense. The mapstructure
// tags are the daemons' keys (host.*); fields tagged config:"advanced"
// are tunables whose defaults need no touching, read from
// advanced.host.* of a daemon's file.
type Config struct {
	// IdentityFile holds the host's private key (and so its peer ID). It
	// is created with mode 0600 on first start and reused after; a file
	// that group or others can access is refused. Required.
	IdentityFile string `mapstructure:"identity_file"`
	// ListenAddrs are TCP multiaddrs to listen on, such as
	// "/ip4/0.0.0.0/tcp/7946" or "/ip4/127.0.0.1/tcp/0". At least one;
	// New fails if any cannot be listened on.
	ListenAddrs []string `mapstructure:"listen_addrs"`
	// AnnounceAddrs, when set, replace the listen addresses in what the
	// host tells other peers (for NAT or container port mappings).
	AnnounceAddrs []string `mapstructure:"announce_addrs"`
	// ClusterKeyFile is the cluster's pre-shared key, in the format
	// GenerateClusterKey writes, and with the same permission rule as
	// IdentityFile. Required unless InsecureOpenCluster.
	ClusterKeyFile string `mapstructure:"cluster_key_file"`
	// InsecureOpenCluster lets any peer connect: no cluster key. For labs
	// only; it may not be combined with ClusterKeyFile.
	InsecureOpenCluster bool `mapstructure:"insecure_open_cluster"`
	// Security is the connection security protocol: SecurityTLS (the
	// default) or SecurityNoise. Both ends of a connection must agree.
	Security string `mapstructure:"security" config:"advanced"`
	// ClusterAuth is how a keyed host keeps outsiders out:
	// ClusterAuthProof (the default) or ClusterAuthPrivateNetwork. Both
	// ends of a connection must agree. Ignored with InsecureOpenCluster.
	ClusterAuth string `mapstructure:"cluster_auth" config:"advanced"`
	// MaxConns caps connections (inbound plus outbound), at least 1;
	// DefaultMaxConns by default. Idle connections are trimmed from 9/10
	// of it.
	MaxConns int `mapstructure:"max_conns" config:"advanced"`
	// MaxConnsPerPeer caps connections to one peer, at least 1 and at
	// most MaxConns; DefaultMaxConnsPerPeer by default.
	MaxConnsPerPeer int `mapstructure:"max_conns_per_peer" config:"advanced"`
	// DialTimeout bounds one dial, handshakes included; positive,
	// DefaultDialTimeout by default.
	DialTimeout time.Duration `mapstructure:"dial_timeout" config:"advanced"`
	// Registerer receives libp2p's Prometheus metrics; nil disables them.
	Registerer prometheus.Registerer `mapstructure:"-"`
	// ResourceMetrics adds the resource manager's gauges (libp2p_rcmgr_*:
	// connections, streams and memory by scope) to Registerer's metrics.
	// Off by default: they are kept up to date by a trace event for every
	// reservation, which under heavy chunk traffic costs about 2 % of the
	// CPU (time formatting included), and even with no Registerer the
	// resource manager would otherwise keep them.
	ResourceMetrics bool `mapstructure:"resource_metrics" config:"advanced"`
}

// Default returns the production configuration for a node whose state
// lives in dir: identity in dir/identity.key, cluster key in
// dir/cluster.key, listening on DefaultListenAddr, and every tunable
// at its default.
func Default(dir string) Config {
	return Config{
		IdentityFile:    dir + "/identity.key",
		ClusterKeyFile:  dir + "/cluster.key",
		ListenAddrs:     []string{DefaultListenAddr},
		Security:        SecurityTLS,
		ClusterAuth:     ClusterAuthProof,
		MaxConns:        DefaultMaxConns,
		MaxConnsPerPeer: DefaultMaxConnsPerPeer,
		DialTimeout:     DefaultDialTimeout,
	}
}

// Validate reports every problem with c at once, each naming its field. It
// does not touch the files; New checks them.
func (c Config) Validate() error {
	var errs []error
	if c.IdentityFile == "" {
		errs = append(errs, errors.New("identity_file: must be set"))
	}
	if len(c.ListenAddrs) == 0 {
		errs = append(errs, errors.New("listen_addrs: must name at least one address"))
	}
	for i, s := range c.ListenAddrs {
		if err := checkTCPAddr(s); err != nil {
			errs = append(errs, fmt.Errorf("listen_addrs[%d]: %w", i, err))
		}
	}
	for i, s := range c.AnnounceAddrs {
		if _, err := ma.NewMultiaddr(s); err != nil {
			errs = append(errs, fmt.Errorf("announce_addrs[%d]: %q: %w", i, s, err))
		}
	}
	switch {
	case c.ClusterKeyFile == "" && !c.InsecureOpenCluster:
		errs = append(errs, errors.New("cluster_key_file: must be set (or insecure_open_cluster, for labs only)"))
	case c.ClusterKeyFile != "" && c.InsecureOpenCluster:
		errs = append(errs, errors.New("insecure_open_cluster: set together with cluster_key_file; choose one"))
	}
	if c.Security != SecurityNoise && c.Security != SecurityTLS {
		errs = append(errs, fmt.Errorf("security: %q is not %q or %q", c.Security, SecurityTLS, SecurityNoise))
	}
	if c.ClusterAuth != ClusterAuthProof && c.ClusterAuth != ClusterAuthPrivateNetwork {
		errs = append(errs, fmt.Errorf("cluster_auth: %q is not %q or %q", c.ClusterAuth, ClusterAuthProof, ClusterAuthPrivateNetwork))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("max_conns: %d is not positive", c.MaxConns))
	}
	if c.MaxConnsPerPeer < 1 {
		errs = append(errs, fmt.Errorf("max_conns_per_peer: %d is not positive", c.MaxConnsPerPeer))
	} else if c.MaxConns >= 1 && c.MaxConnsPerPeer > c.MaxConns {
		errs = append(errs, fmt.Errorf("max_conns_per_peer: %d is above max_conns %d", c.MaxConnsPerPeer, c.MaxConns))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("dial_timeout: %v is not positive", c.DialTimeout))
	}
	return errors.Join(errs...)
}

// checkTCPAddr accepts a multiaddr that libp2p's TCP transport can listen
// on: an IP or DNS name, then /tcp/PORT, and nothing after.
func checkTCPAddr(s string) error {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	ps := a.Protocols()
	if len(ps) == 0 {
		return fmt.Errorf("%q is empty", s)
	}
	switch ps[0].Code {
	case ma.P_IP4, ma.P_IP6, ma.P_DNS, ma.P_DNS4, ma.P_DNS6:
	default:
		return fmt.Errorf("%q does not start with an IP address or DNS name", s)
	}
	if len(ps) != 2 || ps[1].Code != ma.P_TCP {
		if _, err := a.ValueForProtocol(ma.P_UDP); err == nil {
			return fmt.Errorf("%q is not a TCP address (QUIC cannot carry a cluster key)", s)
		}
		return fmt.Errorf("%q is not a TCP address such as /ip4/0.0.0.0/tcp/7946", s)
	}
	return nil
}

// Loopback returns Default with the identity in identityFile, listening
// on a free loopback port, keyed by clusterKeyFile or, if that is empty,
// open to any peer: the host of a test or a local demo.
func Loopback(identityFile, clusterKeyFile string) Config {
	c := Default("")
	c.IdentityFile = identityFile
	c.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	c.ClusterKeyFile = clusterKeyFile
	c.InsecureOpenCluster = clusterKeyFile == ""
	return c
}
