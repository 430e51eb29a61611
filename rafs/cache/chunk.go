package cache

import (
	"errors"
	"fmt"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/bufpool"
)

// ReadChunk fills dst (len(dst) == int(ck.Size)) with ck's content from
// the cache, decoded and verified against ck.Digest with
// rafs.DecodeChunkSpare: up to rafs.DecodeSpare bytes of dst's capacity
// past its length may be overwritten (a bufpool buffer's slack; pass
// dst[:n:n] when what follows is not the caller's).
// The entry is looked up by KeyOf(ck), digest and algorithm: an entry of
// the same digest under the other algorithm is a miss, never read nor
// deleted. The entry's stored form need not be ck's: the same content may
// be cached raw from one blob and compressed from another, and either
// serves.
//
// It returns ErrNotFound (possibly wrapped) when the cache does not hold
// the chunk, and also when the entry fails verification: then the entry is
// deleted and counted in Stats.Corrupt, and the caller refetches. Other
// errors are I/O failures or a wrong dst length. On error dst's contents
// are unspecified. A hit counts as a use, as in Get. ReadChunk is safe for
// concurrent use.
func (c *Cache) ReadChunk(ck rafs.Chunk, dst []byte) error {
	if len(dst) != int(ck.Size) {
		return fmt.Errorf("cache: read chunk %s: buffer of %d bytes for %d", ck.Digest, len(dst), ck.Size)
	}
	if c.closed.Load() {
		return ErrClosed
	}
	k := KeyOf(ck)
	var herr error
	if c.hot.get(k, func(m Meta, stored []byte, kept time.Time) {
		if herr = decodeStored(ck, m, stored, dst); herr == nil {
			c.usedHot(k, kept)
		}
	}) {
		if herr == nil {
			return nil
		}
		// What hot holds was read from or written to the file, so the
		// file fails too: read it, for readFailed to deal with.
		c.hot.forget(k)
	}
	for attempt := 0; ; attempt++ {
		if found, err := c.readChunkPack(k, ck, dst); found {
			return err
		}
		if c.entryFiles.Load() {
			if absent, err := c.readChunkEntry(k, ck, dst); !absent {
				return err
			}
		}
		if attempt > 0 || !c.refreshOnMiss() {
			break
		}
	}
	c.n.misses.Add(1)
	return ErrNotFound
}

// readChunkPack is ReadChunk's look in the packs: found reports whether k
// is located in one, and then the error is the read's.
func (c *Cache) readChunkPack(k Key, ck rafs.Chunk, dst []byte) (found bool, err error) {
	l, release, ok := c.locate(k)
	if !ok {
		return false, nil
	}
	defer release()
	e, err := openRecord(l, k)
	if errors.Is(err, errRemoved) {
		c.forgetRecord(k, l)
		return false, nil // look elsewhere: it may be put again
	}
	if err == nil {
		err = decodeEntry(e, ck, dst)
	}
	if err != nil {
		c.n.misses.Add(1)
		return true, c.recordFailed(k, l, err)
	}
	c.usedPack(k, l.p)
	c.n.hits.Add(1)
	c.lookIfStale()
	return true, nil
}

// readChunkEntry is ReadChunk's look at k's entry file; absent reports
// that there is none (not counted as a miss).
func (c *Cache) readChunkEntry(k Key, ck rafs.Chunk, dst []byte) (absent bool, err error) {
	path := c.paths.entry(k)
	e, err := openEntry(path, k, c.direct.Load())
	if e != nil {
		defer e.Close()
	}
	if err == nil {
		err = decodeEntry(e, ck, dst)
	}
	if err != nil && isNotExist(err) {
		if m, stored, ok := c.adoptLegacy(k, nil); ok && decodeStored(ck, m, stored, dst) == nil {
			c.n.hits.Add(1)
			return false, nil
		}
		c.forgetEntry(k)
		return true, ErrNotFound
	}
	if err != nil {
		c.n.misses.Add(1)
		return false, c.readFailed(k, path, e, err)
	}
	c.used(k, path, e.fi)
	c.n.hits.Add(1)
	return false, nil
}

// decodeEntry reads e's payload and decodes it into dst as ck's content.
// A payload that does not decode to ck's bytes makes the entry corrupt.
func decodeEntry(e *entryFile, ck rafs.Chunk, dst []byte) error {
	m := e.hdr.meta
	if m.Size != ck.Size {
		return corruptf("entry holds %d bytes, chunk has %d", m.Size, ck.Size)
	}
	var stored []byte
	var err error
	if !m.Compressed {
		stored, err = e.readPayload(dst) // straight into dst: StoredSize == Size
	} else {
		// Into a buffer of the pool, given back once decoded.
		if stored, err = e.readPayload(nil); err == nil {
			defer bufpool.Put(stored)
		}
	}
	if err != nil {
		return err
	}
	return decodeStored(ck, m, stored, dst)
}

// decodeStored decodes stored, an entry's payload as m describes it, into
// dst as ck's content; bytes that do not decode to it are corrupt.
func decodeStored(ck rafs.Chunk, m Meta, stored, dst []byte) error {
	if m.Size != ck.Size {
		return corruptf("entry holds %d bytes, chunk has %d", m.Size, ck.Size)
	}
	as := ck
	as.CompressedSize = m.StoredSize
	as.Flags &^= rafs.ChunkCompressed
	if m.Compressed {
		as.Flags |= rafs.ChunkCompressed
	}
	if err := rafs.DecodeChunkSpare(as, stored, dst); err != nil {
		return fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return nil
}

// PutChunk stores ck's stored bytes, already verified by the caller, as
// Put does, with the metadata ck gives.
func (c *Cache) PutChunk(ck rafs.Chunk, stored []byte) error {
	m := Meta{Compressed: ck.Compressed(), Size: ck.Size, StoredSize: ck.CompressedSize}
	return c.Put(KeyOf(ck), m, stored)
}
