package cache

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"syscall"
	"time"

	"damselfly/rafs"
)

// Put stores stored, the stored bytes of the chunk whose digest is d, as m
// describes them. The caller has verified them: Put checks only that m is
// consistent (len(stored) == m.StoredSize, sizes within
// rafs.MaxChunkSize). Put does not keep stored.
//
// The entry appears atomically, whole or not at all, for every process
// sharing the directory; if an entry for d of the same length is already
// there, Put only refreshes its recency. Putting the same digest from
// several goroutines or processes at once is harmless. Put recreates
// directories deleted by hand. When the index grows above the high
// watermark, or this Cache has written (High-Low)/2 of Capacity since its
// last scan (to notice other processes' writes), Put rescans and evicts
// before returning (see Rescan), so it may block for a directory scan; a
// failed eviction is logged and counted, not returned.
//
// On ENOSPC or EDQUOT the error wraps ErrNoSpace; on any error no file of
// the entry is left behind. Put is safe for concurrent use.
func (c *Cache) Put(d rafs.Digest, m Meta, stored []byte) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if len(stored) != int(m.StoredSize) {
		return fmt.Errorf("cache: put %s: %d stored bytes, meta says %d", d, len(stored), m.StoredSize)
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("cache: put %s: %w", d, err)
	}
	path := c.paths.entry(d)
	size := int64(headerSize) + int64(len(stored))
	now := time.Now()
	var written int64
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		// Already stored, by this process or another: same content.
		if now.Sub(fi.ModTime()) >= touchInterval {
			_ = os.Chtimes(path, time.Time{}, now)
		}
	} else if err := c.write(d, m, path, stored); err != nil {
		return err
	} else {
		written = size
	}
	c.n.puts.Add(1)
	c.mu.Lock()
	c.idx.add(d, size, now.UnixNano())
	c.written += written
	over := c.high > 0 && (c.idx.bytes > c.high || c.written >= c.rescanEvery)
	c.mu.Unlock()
	if over {
		c.evictFromPut()
	}
	return nil
}

// write writes d's entry file, again (a few times) if the directory was
// being deleted under it: a concurrent rm -rf makes mkdir, create and
// rename fail with ENOENT, and MkdirAll with EEXIST when the directory it
// found vanished before it could check it.
func (c *Cache) write(d rafs.Digest, m Meta, path string, stored []byte) error {
	h := header{digest: d, meta: m, payloadCRC: crc32.Checksum(stored, castagnoli)}
	shard := c.paths.shard(d)
	direct := c.direct.Load()
	err := writeEntry(shard, path, h, stored, direct)
	for attempt := 0; attempt < 4 && (isNotExist(err) || errors.Is(err, fs.ErrExist)); attempt++ {
		err = writeEntry(shard, path, h, stored, direct)
	}
	if direct && err != nil && isDirectRefused(err) {
		// The probe at Open passed, so this is one the device would not
		// take (a file system mounted over the directory since, say).
		c.n.directRefused.Add(1)
		err = writeEntry(shard, path, h, stored, false)
	}
	if err == nil {
		return nil
	}
	c.n.errors.Add(1)
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("cache: put %s: %w: %w", d, ErrNoSpace, err)
	}
	return fmt.Errorf("cache: put %s: %w", d, err)
}

// Remove deletes d's entry, for example after the caller found its bytes
// fail verification. Removing an absent entry is not an error. A reader
// that has the file open keeps reading it. Remove is safe for concurrent
// use.
func (c *Cache) Remove(d rafs.Digest) error {
	if c.closed.Load() {
		return ErrClosed
	}
	err := os.Remove(c.paths.entry(d))
	c.forget(d)
	if err != nil && !isNotExist(err) {
		c.n.errors.Add(1)
		return fmt.Errorf("cache: remove %s: %w", d, err)
	}
	return nil
}
