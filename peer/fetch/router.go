package fetch

import (
	"context"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
)

// Router is how a peer learns where the chunks it misses are and tells
// what it holds. The scheduler client implements it (scheduler/client); a
// libp2p DHT router could be another. Chunks are named by their ordinal
// in the blob (rafs.Chunk.Ordinal); ordinal lists are ascending and
// without duplicates.
//
// Implementations are safe for concurrent use. Announce, Drop, Abandon
// and Report never block on the network: they queue, and the router
// delivers in the background (re-announcing everything after it
// reconnects to a scheduler).
type Router interface {
	// Route answers where to get chunks of blob, whose stored sizes add
	// up to bytes (0: not known; it lets the scheduler bound this peer's
	// origin turns in bytes). Every chunk asked for
	// is in exactly one of the answer's Parents[i].Chunks, Origin or
	// Wait[i].Chunks. It fails with an error wrapping route.ErrNoRoute when no
	// scheduler answers in time; the caller then uses parents it learnt
	// recently and goes to origin for the rest. It blocks at most until
	// ctx is done.
	Route(ctx context.Context, blob rafs.Digest, chunks []uint32, bytes uint64) (route.Route, error)
	// Announce says this peer now holds chunks of blob: verified and in
	// the node cache, ready to serve.
	Announce(blob rafs.Digest, chunks []uint32)
	// Drop says this peer no longer holds chunks of blob (evicted).
	Drop(blob rafs.Digest, chunks []uint32)
	// Abandon gives up this peer's turn to fetch chunks of blob from
	// origin (the fetch failed), so that another peer gets the turn.
	Abandon(blob rafs.Digest, chunks []uint32)
	// Report tells how fetching an assignment from parent went.
	Report(parent lpeer.ID, o route.Outcome)
}

// RouteWaiter is a Router that can hold a route. RouteWait is Route,
// except that when the whole answer would be to wait, the router may
// answer only once one of the chunks has a new holder or a free origin
// turn, or maxWait has passed. It blocks at most until ctx is done. A
// Router without it is polled: the node waits out the answer's
// RetryAfter and routes again.
type RouteWaiter interface {
	RouteWait(ctx context.Context, blob rafs.Digest, chunks []uint32, bytes uint64, maxWait time.Duration) (route.Route, error)
}
