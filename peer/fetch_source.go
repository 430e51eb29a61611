package peer

import (
	"crypto/sha256"
	"encoding/binary"

	"damselfly/peer/cache"
	"damselfly/proxy"
	"damselfly/rafs"
)

// sourceKey names where a read's chunks come from when no peer holds
// them: the registry, the repository and the credentials of its
// proxy.Upstream, hashed (SHA-256, each field length-prefixed) so that no
// map of the node holds a client's Authorization header in clear.
type sourceKey [sha256.Size]byte

// sourceOf is up's sourceKey.
func sourceOf(up proxy.Upstream) sourceKey {
	h := sha256.New()
	for _, s := range []string{up.Registry, up.Repo, up.Authorization} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var k sourceKey
	h.Sum(k[:0])
	return k
}

// flightKey is what a fetch in flight is shared by: the chunk (digest and
// digest algorithm: a read that names the same digest under the other
// algorithm wants another chunk) and the source. Reads with another
// source get a fetch of their own, so that one reader's bogus registry or
// credentials cannot fail another's read: the origin fetch of a flight
// uses its leading read's source, and its failure is its waiters'.
type flightKey struct {
	chunk  cache.Key
	source sourceKey
}

func flightKeyOf(c rafs.Chunk, src sourceKey) flightKey {
	return flightKey{chunk: cache.KeyOf(c), source: src}
}
