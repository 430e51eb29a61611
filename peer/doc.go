// Package peer is the node daemon's chunk source: Node serves the chunks
// of RAFS blobs to the node's readers (the proxy's batch endpoint, and
// through it the mount daemons) from the node cache, then other peers,
// then the origin registry, and tells the scheduler what the node holds.
//
// The parts:
//
//   - node.go: Node, NewNode, Run (holdings upkeep) and Close; config.go
//     its NodeConfig. The Node is the wiring: it owns the holdings and
//     builds the fetch engine (package fetch) over the node cache, the
//     holdings, the host, the Router and the origin.
//   - fetch_node.go: ReadChunks and ReadChunksEarly, which are the
//     engine's, and Hold, the engine's view of the holdings.
//   - adopt.go: Adopt, which records cached chunks a verified bootstrap
//     names as held (for the preheat worker, package preheat).
//   - holdings.go, holdings_format.go: which chunks the node holds, per
//     blob, persisted so that they are announced again after a restart and
//     dropped when the cache evicts them; evicted.go sends those drops at
//     once (the cache's evict hook, and the exchange server's miss hook
//     for a held chunk found gone). The holdings are also what the node
//     knows to be part of each blob: a chunk is taken from the cache for
//     a read of a blob, or sent to a peer as part of one (PartOf, the
//     exchange server's part-of hook), only if it is held for that blob.
//   - the node's plain blobs (package plain): Plain returns the source the
//     mirror serves plain (non-RAFS) layers from, pieces read through the
//     same engine; the Node is its plain.Holdings (fetch_node.go).
//
// A chunk's identity is its digest and its digest algorithm
// (rafs.ChunkBlake3, rafs.ChunkStoredDigest) everywhere: node cache entries (cache.Key),
// holdings, exchange lookups and the engine's flights. A read that names
// a stored digest under the other algorithm misses; it never gets the entry
// deleted or its holder reported.
//
// Every chunk is verified against its digest before it is cached, handed
// to a reader or announced, and announced only once it is in the node
// cache. Subpackages: fetch (the fetch engine, with its counters and
// Stats), host (the libp2p host), exchange (the chunk and piece table
// protocols), plain (plain blobs as pieces), preheat (the preheat
// worker, which reads an image's chunks through the Node for the
// scheduler client's preheat streams), daemon (the assembled peer
// daemon). The node cache is rafs/cache, piece tables rafs/piece, the
// Router's answer types rafs/route: contracts shared with other daemons.
package peer
