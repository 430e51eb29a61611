// Package route is the contract between a peer's fetch engine
// (peer/fetch) and whatever tells it where chunks are (the scheduler
// client, scheduler/client): a Route names, for the chunks of a blob a
// peer misses, the parents to fetch them from, the chunks that are its
// turn to fetch from the origin registry, and those to ask about again
// later; an Outcome is the peer's account of one assignment to a parent.
//
// Neither side owns it, so neither imports the other: the engine declares
// the Router interface it consumes in terms of these types, and the
// scheduler client implements it. Chunks are named by their ordinal in
// the blob (rafs.Chunk.Ordinal). The package imports rafs and libp2p's
// peer identities only; it has no behaviour.
package route
