// Package client is the peer side of the scheduler protocol: it implements
// the fetch engine's Router (peer/fetch), in the route types of
// rafs/route, over one or more scheduler daemons.
//
// Membership goes to every scheduler: the client registers with each and
// heartbeats each. A blob's state lives on one scheduler, the one
// scheduler.Pick chooses among the live ones, so announcements and route
// queries for a blob go there. A scheduler that misses heartbeats is marked
// dead and its blobs move to the runner-up; a scheduler that answers again,
// or answers "unknown peer" (it restarted with empty state), gets a fresh
// registration and, for every blob it owns, the client's full holdings
// (AnnounceFull). For that the client keeps a bitset of the chunks it holds
// per blob, updated by Announce and Drop.
//
// The parts:
//
//   - config.go: Config, Default and Validate.
//   - client.go: New, Run, SetLoad and the shared state.
//   - remote.go: one worker per scheduler: register, heartbeat, liveness.
//   - holdings.go: Announce, Drop, Abandon and Report, which queue (and
//     coalesce per blob) without touching the network.
//   - flush.go: the loop that delivers them to each blob's owner, in full
//     when the owner changed.
//   - route.go: Route, which asks the owner and falls back by Pick order.
//   - call.go: one request/response stream.
//   - preheat.go, preheat_config.go: PreheatServer, the peer's side of
//     the preheat protocol (scheduler/preheatwire): it admits streams
//     from the configured schedulers, reads the request, has the peer's
//     Preheater (peer/preheat) do the work and sends progress and the
//     result. The worker imports nothing of the scheduler's.
package client
