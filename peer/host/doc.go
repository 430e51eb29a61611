// Package host builds the peer daemon's libp2p host: TCP, TLS (or Noise),
// yamux, a persistent identity and cluster membership by pre-shared key.
//
// A cluster is the set of peers that hold the same cluster key. Every raw
// TCP connection of a keyed host first runs the knock (knock.go), which
// refuses a peer with another key or none before any public-key work.
// Membership itself is proven in one of two ways (Config.ClusterAuth). By
// default, right after the TLS or Noise handshake, each side proves it
// holds the key in a MAC bound to both authenticated peer IDs (proof.go),
// so traffic is encrypted once. The alternative is libp2p's private
// network (pnet): every connection wrapped in a stream cipher keyed by the
// cluster key under the security protocol, which halves throughput per
// core. Either way a peer without the key never reaches a protocol
// handler. InsecureOpenCluster turns membership off (every peer that can
// reach the port may connect); it is meant for labs only. Only TCP is
// offered.
//
// The parts:
//
//   - config.go: Config, Default and Validate.
//   - identity.go: the identity key file, created on first start and reused.
//   - clusterkey.go: the cluster key file format, GenerateClusterKey and
//     loading.
//   - knock.go: the knock on raw connections; proof.go: the cluster proof.
//   - host.go: New, which assembles the libp2p host with connection limits,
//     and the Host wrapper.
//
// Key files hold secrets: both are refused when group or others have any
// access to them (as ssh does for private keys).
package host
