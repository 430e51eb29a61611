// Package scheduler is the coordinator's deterministic core: which peers
// are members, which chunks each holds, where a peer should fetch chunks
// from, who fetches a chunk nobody holds from origin, and which peers are
// banned. It is a state machine (State) with no network, no goroutines
// and no clock: the scheduler daemon authenticates peers over libp2p,
// decodes their requests, calls State with the caller's peer ID and the
// current time, and sends back what it returns. Tests drive it the same
// way with a clock of their own.
//
// # Naming chunks
//
// A chunk is named by its blob's digest and its ordinal in the blob: its
// position among the blob's chunks in storage order (ascending
// CompressedOffset), from 0 to Blob.ChunkCount-1. Ordinals, not indexes
// into an image's chunk table, because blobs are shared between images
// (layer-aligned output) and the node cache stores a chunk once whatever
// image it came from, while chunk-table indexes differ from image to
// image. The ordinal depends only on the blob, so every peer names a
// shared chunk alike. A peer numbers a blob's chunks by sorting the
// chunk records of that blob by offset; this needs all of the blob's
// chunks, which an image's bootstrap lists for the blobs its own layers
// produced (a blob reused from a chunk dictionary is listed only in part:
// its ordinals come from the dictionary's bootstrap).
//
// # Parts
//
//   - Membership (membership.go): Register starts a session, Heartbeat
//     renews it, and a peer silent for Config.PeerTTL is never offered
//     again and is dropped by Expire with everything it announced. Each
//     method acts only for the peer ID the transport authenticated. At
//     most Config.MaxPeers are members, at most Config.MaxPeersPerSource
//     of them from one machine; past either, new peers are refused.
//   - Holdings (holdings.go, slab.go, bitset.go): per blob, one bitset of
//     chunk ordinals per holder, all of a blob's bitsets back to back in
//     one slab so that a query streams through them. 1,000 peers × 200
//     blobs × 1,000 chunks, half held, is 200,000 holdings in about 35 MiB
//     of heap. Announce adds, AnnounceFull replaces (after a reconnect),
//     Drop removes. A per-peer memory budget bounds what one peer can
//     make the scheduler store, counting each blob at what a blob
//     nobody else holds costs, and a budget over all peers bounds the
//     total.
//   - Parent selection (parents.go, parents_choose.go, request.go,
//     score.go): Parents answers with up to Config.MaxParents peers that
//     together cover the chunks asked for, chosen by greedy weighted set
//     cover on coverage × score, the score weighing locality (host, rack,
//     zone labels), load against capacity, and reported success and
//     throughput. Every assignment counts as load on its parent until it
//     is reported on or times out (lease.go), so concurrent requesters
//     spread; a seeded jitter shares the load among near-equal peers. Load
//     and health lower a score, never exclude a holder for good. A blob
//     with many holders is sampled (Config.ParentSample): every holder on
//     the requester's host, a bounded random share of each other locality
//     tier, and any holder of a chunk the share does not cover, so a
//     query's cost does not grow with the cluster and no held chunk goes
//     to origin.
//   - Relay trees (tree.go, leaseindex.go, waits.go): a parent with a
//     few assignments outstanding is full; a requester whose chunks only
//     full parents hold waits briefly for the peers already assigned
//     them (future holders, as origin fetchers are, found through an
//     index of each blob's leases by chunk) and is then served by them,
//     so a chunk wanted by many at once spreads down a tree, not a star
//     from its first holder. A requester that waited long, or has no
//     future holder to wait for, is served by a full parent.
//   - Back-to-source coordination (origin.go): for a chunk no eligible
//     peer holds, at most Config.OriginFetchers peers at a time are told
//     to fetch it from origin; the rest are told to wait for them and ask
//     again, and are returned by Announce to be woken when it arrives. A
//     fetcher that neither announces nor gives up within
//     Config.OriginTimeout loses its turn to the next peer that asks.
//     While others want the same blob, a peer holds at most
//     Config.OriginTurnsPerPeer turns, or more while they add up to less
//     than Config.OriginTurnBytesPerPeer of the stored bytes its queries
//     give, so first copies enter through several nodes and small
//     chunks still come from origin in large ranged GETs.
//   - Feedback and bans (feedback.go, refute.go): reports must name an
//     assignment the scheduler made and are taken once each; they move a
//     parent's moving averages. Chunks a parent answered "not found" for
//     are cleared and, for Config.RefuteDuration, not taken from its
//     announcements again, unless the parent owned up to the first miss
//     with a Drop (an eviction). A bad-bytes accusation costs the accused one chunk
//     and the accuser's custom; a cluster-wide ban needs accusers on
//     Config.BanQuorum distinct machines (PeerInfo.Source, the address
//     the transport saw, not peer IDs, which cost nothing), and
//     accusations are rate-limited per reporter.
//   - Admin views (admin.go): sorted copies of peers, blob holdings,
//     origin fetches in flight and bans, and counts for metrics.
//   - Placement (pick.go): Pick maps a blob to one of several schedulers
//     by rendezvous hashing, so that each blob's state lives on one and
//     only the blobs of a scheduler that dies move.
//
// # Soft state
//
// Nothing here is persisted, and nothing needs to be: a scheduler that
// restarts answers ErrUnknownPeer to the first heartbeat of each peer,
// which registers again and announces its holdings in full, and the
// answers are what they were once the peers have (see the restart test).
// While no scheduler answers, peers serve each other from recent answers
// and go to origin for the rest.
//
// # Concurrency
//
// State is safe for concurrent use behind a read-write mutex. Parents
// searches under the read lock, so queries run in parallel, and records
// its assignments, origin turns and tree waits still under the read
// lock, holding a second, plain mutex only for that (and for finding
// future holders); Report records most outcomes the same way. So queries
// and reports wait for each other only briefly; changes of membership
// and holdings take the write lock. A query for a run of 1 to 16 chunks
// at the scale above takes about 20 to 30 µs (median, on 2 cores): one
// goroutine answers 30,000 to 40,000 such queries/s, two 35,000 to
// 50,000, each followed by reports or not, more than the 20,000
// queries/s such a cluster needs; more schedulers (Pick) scale further.
package scheduler
