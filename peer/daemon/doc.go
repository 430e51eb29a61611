// Package daemon assembles the peer daemon that runs on every node: the
// libp2p host (peer/host), the node cache shared with the mount daemons
// (rafs/cache), the chunk exchange server that lets other peers read that
// cache (peer/exchange), the scheduler client (scheduler/client), the
// upstream registry client (rafs/registry), the Node that fetches chunks
// from cache, peers and origin (peer), and the HTTP endpoint that mounts
// and registry clients use (proxy).
//
// config.go holds Config, the daemon's configuration file shape (see
// configs/peer.yaml), with Default and Validate; daemon.go builds the parts
// in dependency order (New), runs them in one errgroup (Run) and closes
// them in reverse order.
package daemon
