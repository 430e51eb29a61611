package cache

import (
	"fmt"

	"damselfly/rafs"
)

// Key names a cache entry: a chunk's digest and the algorithm that made
// it. Both are the chunk's identity: the same 32 bytes read as a SHA-256
// digest and as a BLAKE3 one name two different chunks, so an entry
// stored under one is never found, served or judged under the other.
type Key struct {
	Algo   rafs.DigestAlgo
	Digest rafs.Digest
}

// KeyOf is the key of chunk c: its digest, and the algorithm its flags
// name (rafs.ChunkBlake3, rafs.ChunkStoredDigest).
func KeyOf(c rafs.Chunk) Key { return Key{Algo: c.Algo(), Digest: c.Digest} }

// SHA256 is the key of the chunk whose SHA-256 digest is d.
func SHA256(d rafs.Digest) Key { return Key{Algo: rafs.DigestSHA256, Digest: d} }

// valid reports whether the cache can hold an entry under k: its
// algorithm is one it knows.
func (k Key) valid() bool { return k.Algo.Valid() }

// String gives the key as "<algorithm>:<hex>": "sha256:…", "blake3:…"
// or "blake3-stored:…".
func (k Key) String() string { return fmt.Sprintf("%s:%x", k.Algo, k.Digest[:]) }
