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
//   - plain.go: plain (non-RAFS) blobs for the mirror (proxy.BlobSource):
//     pieces (package piece) read as raw chunks under the blob's plain
//     key (fetch.Engine.ReadPieces, which asks the origin for the blob
//     itself; RAFS reads go to the origin reader unwrapped), the piece
//     tables this node checked (served to peers over
//     exchange.TableProtocolID), a table fetched from a holder, and the
//     recording of a blob streaming from the origin; plain_store.go keeps
//     the checked tables on disk across restarts.
//
// A chunk's identity is its digest and its digest algorithm
// (rafs.ChunkBlake3) everywhere: node cache entries (cache.Key),
// holdings, exchange lookups and the engine's flights. A read that names
// a stored digest under the other algorithm misses; it never gets the entry
// deleted or its holder reported.
//
// Every chunk is verified against its digest before it is cached, handed
// to a reader or announced, and announced only once it is in the node
// cache. Subpackages: fetch (the fetch engine, with its counters and
// Stats), host (the libp2p host), exchange (the chunk and piece table
// protocols), preheat (the preheat
// worker, which reads an image's chunks through the Node for the
// scheduler client's preheat streams), daemon (the assembled peer
// daemon). The node cache is rafs/cache, piece tables rafs/piece, the
// Router's answer types rafs/route: contracts shared with other daemons.
package peer
