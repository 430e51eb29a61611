// Package peer is the node daemon's chunk source: Node serves the chunks
// of RAFS blobs to the node's readers (the proxy's batch endpoint, and
// through it the mount daemons) from the node cache, then other peers,
// then the origin registry, and tells the scheduler what the node holds.
//
// The parts:
//
//   - router.go: Router, how a node learns where chunks are and says what
//     it holds (the scheduler client implements it).
//   - node.go: Node, NewNode, Run (holdings upkeep) and Close; config.go
//     its NodeConfig.
//   - fetch_read.go: ReadChunks, which delivers in request order, reading
//     cache hits in turn and waiting for the misses' fetch, and
//     ReadChunksEarly, which hands a fetched chunk over as soon as it is
//     verified, while the node caches and announces it.
//   - fetch_flight.go: one fetch per chunk however many reads want it,
//     cancelled only when every read waiting for it has gone. A flight is
//     keyed (fetch_source.go) by the chunk's digest and digest algorithm,
//     the read's source (registry, repository and a SHA-256 of its
//     credentials) and its description of the chunk (blob, offset,
//     sizes, flags): a read that would fetch otherwise gets a fetch of
//     its own, so that one reader's bogus registry, credentials or
//     description cannot fail another's read.
//   - fetch.go, fetch_round.go: the retry loop of a batch of misses: ask
//     the Router, fetch from the parents it names (several at once) and
//     from the origin on this node's turn, wait when told to, until every
//     chunk arrived or FetchDeadline passed without progress. Without a
//     Router answer, parents learnt recently (recent.go) are asked, then
//     the origin, so reads never fail because the scheduler is gone.
//   - fetch_parent.go: the chunk exchange with one parent (peer/exchange),
//     reporting each assignment and avoiding a parent that sent bad bytes
//     (for AvoidDuration) or ran out of ParentTimeout (for
//     SlowAvoidDuration: its chunks then go to recent parents or the
//     origin at once).
//   - fetch_hedge.go: the hedged request: a parent that delivers no chunk
//     for HedgeDelay has the chunks it owes asked for again where the
//     Router now says; the first verified copy wins and the slower
//     request is cancelled.
//   - fetch_origin.go: ranged GETs to the origin, adjacent chunks merged,
//     each chunk verified before use; bytes that fail end that chunk's
//     read at once, for good (the read described the chunk wrongly).
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
//     key, the piece tables this node checked (served to peers over
//     exchange.TableProtocolID), a table fetched from a holder, and the
//     recording of a blob streaming from the origin; plain_store.go keeps
//     the checked tables on disk across restarts.
//   - metrics.go: Prometheus counters and Stats, by source.
//
// A chunk's identity is its digest and its digest algorithm
// (rafs.ChunkBlake3) everywhere: node cache entries (cache.Key),
// holdings, exchange lookups and flights. A read that names a stored
// digest under the other algorithm misses; it never gets the entry
// deleted or its holder reported.
//
// Every chunk is verified against its digest before it is cached, handed
// to a reader or announced, and announced only once it is in the node
// cache. Subpackages: host (the libp2p host), exchange (the chunk and
// piece table protocols), cache (the node cache), preheat (the preheat
// worker, which reads an image's chunks through the Node for the
// scheduler client's preheat streams), daemon (the assembled peer
// daemon). Piece tables are rafs/piece; the Router's answer types are
// rafs/route.
package peer
