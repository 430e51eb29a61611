package peer

import (
	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// Evictions reach the Router as soon as this node knows of them, so that
// the scheduler stops naming it for chunks it no longer has: at once for
// what its own cache evicted (the cache's evict hook), when a requester
// asks for a held chunk that is gone (another process sharing the cache
// directory evicted it, or it was deleted by hand: Missed), and otherwise
// at the next holdings check. A requester that was told "not found" for
// a chunk this node then drops is not taken for a lie by the scheduler
// (scheduler/refute.go).

// evicted drops the holdings of chunks the cache just deleted.
func (n *Node) evicted(keys []cache.Key) {
	gone := make(map[cache.Key]struct{}, len(keys))
	for _, k := range keys {
		gone[k] = struct{}{}
	}
	n.dropHoldings(n.hold.dropKeys(gone, nil, n.cache.Has))
}

// Missed is told that a peer asked this node for the chunk of blob whose
// cache key (digest and algorithm) is k and the cache did not have it. If
// the holdings still list it, and it is still gone, it is dropped and the
// Router told; a holding of the same digest under the other algorithm is
// another chunk, and stays. It costs a walk over the blob's holdings and
// is safe for concurrent use.
func (n *Node) Missed(blob rafs.Digest, k cache.Key) {
	n.dropHoldings(n.hold.dropKeys(map[cache.Key]struct{}{k: {}}, &blob, n.cache.Has))
}

func (n *Node) dropHoldings(gone map[rafs.Digest][]uint32) {
	for blob, ords := range gone {
		n.m.Dropped(len(ords))
		n.router.Drop(blob, ords)
	}
}

// PartOf reports whether the node knows chunk k to be part of blob (it
// fetched the chunk as part of the blob, or read a verified bootstrap
// that says so): the exchange server serves a chunk to peers only as part
// of a blob it is known to be in (exchange.Server.SetPartOfHook).
func (n *Node) PartOf(blob rafs.Digest, k cache.Key) bool { return n.hold.holdsKey(blob, k) }
