// Package server is the scheduler daemon's server: it serves the
// scheduler protocol (scheduler/wire, documented in
// scheduler/PROTOCOL.md) over a libp2p host it is given (scheduler/daemon
// builds the cluster's host with peer/host and passes it in) and drives the deterministic core (package scheduler) with
// each stream's authenticated peer ID and the current time.
//
// The parts:
//
//   - config.go: Config, Default and Validate.
//   - server.go: New and Run, which own the host given, the admin listener and
//     the expiry loop, and close them all when Run returns.
//   - handler.go: the stream handler, with per-stream deadlines and
//     bounded concurrent streams per peer, and the mapping of requests to
//     State calls and of core errors to error codes.
//   - watch.go: held routes (RouteWait): a route that would only wait is
//     answered when one of its chunks is announced or given up.
//   - admin.go: the loopback admin HTTP API (peers, blobs, origin fetches,
//     bans, health); admin_json.go: its JSON documents.
//   - metrics.go: Prometheus metrics on the server's own registry.
//   - preheat*.go: preheat jobs: the admin API that starts, lists and
//     cancels them, the choice of target peers spread over zones, racks
//     and hosts, and one preheat stream per target.
//
// Every request acts for the peer that opened the stream, as libp2p
// authenticated it, never for an ID named in the request.
package server
