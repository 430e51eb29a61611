package cache

import (
	"errors"
	"os"

	"damselfly/rafs"
)

// adoptLegacy is a BLAKE3 lookup's second chance, when k's entry file is
// missing. The release before named every entry by its digest alone, so
// it wrote BLAKE3 chunks as version 1 entries at the bare-hex name, where
// this release keeps SHA-256 entries (CACHE.md, "Versions"). If the entry
// there holds bytes that verify as k's chunk under BLAKE3, they are k's:
// adoptLegacy writes them as k's entry, deletes the old file (unless it
// was replaced meanwhile) and returns them, appended to dst[:0].
// Otherwise it reports false and touches nothing: the file may be a good
// SHA-256 entry, and a read that names its digest under BLAKE3, by
// mistake or to do harm, must cost it nothing. Outside that case the
// check never runs: a SHA-256 entry with a BLAKE3 chunk's digest would
// take a collision across the two hashes.
func (c *Cache) adoptLegacy(k Key, dst []byte) (Meta, []byte, bool) {
	if k.Algo != rafs.DigestBlake3 {
		return Meta{}, nil, false
	}
	old := SHA256(k.Digest)
	path := c.paths.entry(old)
	e, err := openEntry(path, old, false)
	if e != nil {
		defer e.Close()
	}
	if err != nil {
		return Meta{}, nil, false
	}
	stored, err := e.readPayload(dst)
	if err != nil {
		return Meta{}, nil, false
	}
	m := e.hdr.meta
	ck := rafs.Chunk{Digest: k.Digest, Flags: rafs.ChunkBlake3, Size: m.Size, CompressedSize: m.StoredSize}
	if m.Compressed {
		ck.Flags |= rafs.ChunkCompressed
	}
	var scratch []byte // a legacy entry is read once: no pool
	if rafs.VerifyChunk(ck, stored, &scratch) != nil {
		return Meta{}, nil, false
	}
	if err := c.Put(k, m, stored); err != nil {
		// Served all the same; a process that may only read leaves
		// the move to one that may write.
		if !errors.Is(err, ErrReadOnly) {
			c.log.Warn("cache: keeping a BLAKE3 entry of the release before", "key", k, "err", err)
		}
		return m, stored, true
	}
	if now, err := os.Lstat(path); err == nil && os.SameFile(now, e.fi) {
		if os.Remove(path) == nil {
			c.forget(old)
		}
	}
	c.log.Info("cache: moved a BLAKE3 entry of the release before to its own name", "key", k)
	return m, stored, true
}
