// Package host builds the peer daemon's libp2p host: TCP, Noise (or TLS),
// yamux, a persistent identity and cluster membership by pre-shared key.
//
// A cluster is the set of peers that hold the same cluster key. By default
// the key is used as a libp2p private network (pnet): every TCP connection
// is wrapped in a stream cipher keyed by it before any libp2p handshake, so
// a peer without the key, or with another one, fails the handshake and
// never reaches a protocol handler. InsecureOpenCluster turns membership
// off (every peer that can reach the port may connect); it is meant for
// labs only. QUIC cannot carry a private network, so only TCP is offered.
//
// The parts:
//
//   - config.go: Config, Default and Validate.
//   - identity.go: the identity key file, created on first start and reused.
//   - clusterkey.go: the cluster key file format, GenerateClusterKey and
//     loading.
//   - host.go: New, which assembles the libp2p host with connection limits,
//     and the Host wrapper.
//
// Key files hold secrets: both are refused when group or others have any
// access to them (as ssh does for private keys).
package host
