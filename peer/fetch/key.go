package fetch

import (
	"crypto/sha256"
	"encoding/binary"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
)

// sourceKey names where a read's chunks come from when no peer holds
// them: the registry, the repository and the credentials of its
// registry.Ref, hashed (SHA-256, each field length-prefixed) so that no
// map of the node holds a client's Authorization header in clear.
type sourceKey [sha256.Size]byte

// sourceOf is up's sourceKey.
func sourceOf(up registry.Ref) sourceKey {
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
// algorithm wants another chunk), the source, and where the chunk is, as
// the read describes it (blob, offset, stored length, size, flags).
// A flight's origin fetch uses its leading read's source and
// description, and its failure is its waiters': a read with a bogus
// registry or credentials fails for want of access, one with a wrong
// offset or size for a digest mismatch, at once and for good. So a read
// joins only a fetch that would do exactly what its own would, and one
// reader's bogus source or description cannot fail another's read.
// Reads of the same content from two blobs, rare, fetch it apiece.
type flightKey struct {
	chunk        cache.Key
	source       sourceKey
	blob         rafs.Digest
	off          uint64
	stored, size uint32
	flags        uint32
}

func flightKeyOf(blob rafs.Digest, c rafs.Chunk, src sourceKey) flightKey {
	return flightKey{chunk: cache.KeyOf(c), source: src, blob: blob,
		off: c.CompressedOffset, stored: c.CompressedSize, size: c.Size, flags: c.Flags}
}
