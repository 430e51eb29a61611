// Package fetch is the peer's fetch engine: it gets the chunks a node's
// readers miss from other peers and the origin registry, verifies each
// against its digest, and caches, records and announces it before any
// reader counts on it. peer.Node builds one Engine and hands it its
// dependencies: the node cache (Cache), what the node holds (Holdings),
// the libp2p host for the chunk exchange (peer/exchange), the Router
// (scheduler/client; its answer types are rafs/route), the origin reader
// (rafs/registry), metrics, a logger and a clock.
//
// A read goes, in order:
//
//   - read.go: ReadChunks and ReadChunksEarly, the entry. Hits are read
//     from the cache in turn; the misses join flights.
//   - flight.go, key.go: one fetch per chunk however many reads want it
//     (a rafs/flight group), cancelled only when every read waiting for
//     it has gone. A flight is
//     keyed by the chunk's digest and algorithm, the read's source
//     (registry, repository and a SHA-256 of its credentials) and its
//     description of the chunk, so that one reader's bogus registry,
//     credentials or description cannot fail another's read.
//   - group.go: the retry loop of a batch of misses (a group): rounds until
//     every chunk arrived or FetchDeadline passed without progress.
//   - keep.go: where a verified chunk lands (handed to the reads, then
//     cached, held and announced in the background), and the cache
//     looked at again before a later round.
//   - round.go: one round: ask the Router (Route), let decide plan it, and
//     run the plan: parents (several at once), this node's origin turns,
//     recent parents and then the origin when no Router answers, and
//     waiting (held by a RouteWaiter, or polled).
//   - plan.go: decide, the per-round decision as a pure function: given
//     the Route, the pending chunks, the peers avoided (with their
//     expiries and the time), and the parents learnt recently, it says
//     what to fetch from whom. No I/O, clock or goroutines: table tests.
//   - parent.go: the chunk exchange with one parent, reporting each
//     assignment and avoiding (avoid.go) a parent that sent bad bytes
//     (AvoidDuration) or made no progress in ParentTimeout
//     (SlowAvoidDuration).
//   - hedge.go: a parent that delivers nothing for HedgeDelay has its
//     chunks asked for again where the Router (through decide) now says;
//     the first verified copy wins.
//   - claim.go: Claim, a fetch its caller makes itself (a plain pull's
//     pieces assigned to one parent) held as the engine's flights, so
//     that a read of the same chunk waits for it instead of fetching it
//     again; what it does not bring, or brings nothing of for HedgeDelay,
//     goes to the engine's own fetch for the reads waiting on it.
//   - origin.go: ranged GETs to the origin, adjacent chunks merged into
//     runs by rafs/runs (Merge), each chunk verified as soon as its bytes
//     are in.
//   - recent.go: the parents the Router named lately, for rounds it does
//     not answer.
//   - router.go: Router and RouteWaiter, the interface this package
//     consumes; errors.go, trace.go, metrics.go: errors, the log line of
//     a slow fetch, counters.
//
// Chunks are named to the Router, the holdings and parents by ordinal in
// their blob; a chunk's identity is its digest and digest algorithm.
package fetch
