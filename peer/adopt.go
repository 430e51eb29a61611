package peer

import (
	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// Adopt takes chunks cs of blob that a verified bootstrap says are part
// of it (a preheat's list): those the node cache holds are recorded as
// held for blob, and announced if that is news, without their bytes
// being read. It returns the others, in order, for the caller to read.
// It implements preheat.Node; safe for concurrent use.
func (n *Node) Adopt(blob rafs.Digest, cs []rafs.Chunk) (missing []rafs.Chunk) {
	var held []uint32
	for _, c := range cs {
		k := cache.KeyOf(c)
		if !n.cache.Has(k) {
			missing = append(missing, c)
			continue
		}
		if n.hold.add(blob, c.Ordinal, k) {
			held = append(held, c.Ordinal)
		}
	}
	if len(held) > 0 {
		n.router.Announce(blob, held)
	}
	return missing
}
