package cache

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Put stores stored, the stored bytes of the chunk whose key is k, as m
// describes them. The caller has verified them: Put checks only that m is
// consistent (len(stored) == m.StoredSize, sizes within
// rafs.MaxChunkSize). Put does not keep stored.
//
// The entry appears atomically, whole or not at all, for every process
// sharing the directory; if an entry for d of the same length is already
// there, Put only refreshes its recency. An entry of the same digest
// under the other algorithm is another entry, and Put leaves it alone.
// Putting the same key from
// several goroutines or processes at once is harmless. Put recreates
// directories deleted by hand.
//
// When the index grows above the high watermark, or this Cache has
// written half of (High-Low)/2 of Capacity since its last scan, Put
// rescans and evicts before returning (see Rescan) unless another
// goroutine is already doing so; a failed eviction is logged and counted,
// not returned. A Put that would take this Cache's writes since its last
// scan, finished and in progress, past (High-Low)/2 of Capacity waits
// for a rescan first: that is what holds the processes sharing the
// directory to the bound CACHE.md gives, however many goroutines write.
//
// In a cache this process may only read, Put stores nothing and its
// error wraps ErrReadOnly. On ENOSPC or EDQUOT the error wraps ErrNoSpace; on any error no file of
// the entry is left behind. Put is safe for concurrent use.
func (c *Cache) Put(k Key, m Meta, stored []byte) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.readOnly {
		return fmt.Errorf("cache: put %s: %w", k, ErrReadOnly)
	}
	if !k.valid() {
		return fmt.Errorf("cache: put %s: unknown digest algorithm", k)
	}
	if len(stored) != int(m.StoredSize) {
		return fmt.Errorf("cache: put %s: %d stored bytes, meta says %d", k, len(stored), m.StoredSize)
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("cache: put %s: %w", k, err)
	}
	size := int64(headerSize) + int64(len(stored))
	now := time.Now()
	if c.hasPack(k) {
		// Already stored, by this process or another: same content.
		c.storedAlready(k, m, stored, size, now)
		return nil
	}
	path := c.paths.entry(k)
	if c.entryFiles.Load() {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
			if now.Sub(fi.ModTime()) >= touchInterval {
				_ = os.Chtimes(path, time.Time{}, now)
			}
			c.storedAlready(k, m, stored, size, now)
			return nil
		}
	}
	if err := c.admit(size); err != nil {
		return err
	}
	var id fileID
	var err error
	if c.direct.Load() || c.cfg.entryFiles {
		id, err = c.write(k, m, path, stored)
	} else {
		id, err = c.writePack(k, m, stored)
	}
	c.mu.Lock()
	c.writing -= size
	if err == nil {
		c.idx.add(k, size, now.UnixNano())
		c.written += size
	}
	over := c.overLocked()
	c.settled.Broadcast()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.n.puts.Add(1)
	c.hot.keep(k, m, stored)
	if id != (fileID{}) {
		c.vouched.add(k, id) // Put's caller verified stored
	}
	if over {
		c.evictFromPut()
	}
	return nil
}

// storedAlready is Put for a key the cache holds: a use of it.
func (c *Cache) storedAlready(k Key, m Meta, stored []byte, size int64, now time.Time) {
	c.n.puts.Add(1)
	c.hot.keep(k, m, stored)
	c.mu.Lock()
	c.idx.add(k, size, now.UnixNano())
	over := c.overLocked()
	c.mu.Unlock()
	if over {
		c.evictFromPut()
	}
}

// writePack appends k's record to a pack, turning failures into Put's
// errors as write does.
func (c *Cache) writePack(k Key, m Meta, stored []byte) (fileID, error) {
	id, err := c.putPack(k, m, stored)
	if err == nil {
		return id, nil
	}
	return fileID{}, c.putFailed(k, err)
}

// putFailed counts a failed write of k and makes it Put's error, wrapping
// ErrNoSpace when the disk or the quota is full.
func (c *Cache) putFailed(k Key, err error) error {
	c.n.errors.Add(1)
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("cache: put %s: %w: %w", k, ErrNoSpace, err)
	}
	return fmt.Errorf("cache: put %s: %w", k, err)
}

// overLocked reports whether a rescan is due: the index is above the high
// watermark, or this Cache has written half of rescanEvery since the last
// one. Rescanning at half leaves the other half for the writes that go on
// while it runs, so writers seldom wait in admit. The caller holds mu.
func (c *Cache) overLocked() bool {
	return c.high > 0 && (c.idx.bytes > c.high || c.written >= c.rescanEvery/2)
}

// admit returns when this Cache may write size more bytes of entry files,
// having counted them in writing: when its writes since the last rescan,
// finished and in progress, stay within rescanEvery with them, or when
// there are none (an entry larger than rescanEvery goes alone). Otherwise
// it waits for the writes in progress to end, then rescans (or waits for
// the rescan another goroutine is running), and checks again. It fails
// only when the Cache is closed meanwhile.
func (c *Cache) admit(size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.high > 0 && c.written+c.writing > 0 && c.written+c.writing+size > c.rescanEvery {
		if c.closed.Load() {
			return ErrClosed
		}
		if c.writing > 0 {
			c.settled.Wait()
			continue
		}
		c.mu.Unlock()
		c.rescanForWrite(size)
		c.mu.Lock()
	}
	c.writing += size
	return nil
}

// rescanForWrite rescans for admit, or, if another goroutine is
// rescanning, waits for it and rescans only if that did not make room.
func (c *Cache) rescanForWrite(size int64) {
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	c.mu.Lock()
	due := c.written+c.writing > 0 && c.written+c.writing+size > c.rescanEvery
	c.mu.Unlock()
	if !due || c.closed.Load() {
		return
	}
	if err := c.rescanLocked(); err != nil {
		c.log.Warn("cache: eviction failed", "dir", c.cfg.Dir, "err", err)
		// Without a scan the count cannot come down: start it again
		// rather than stop every writer on a broken lock file. Puts
		// try to rescan again after another half of rescanEvery.
		c.mu.Lock()
		c.written = 0
		c.mu.Unlock()
	}
}

// write writes k's entry file, again (a few times) if the directory was
// being deleted under it: a concurrent rm -rf makes mkdir, create and
// rename fail with ENOENT, and MkdirAll with EEXIST when the directory it
// found vanished before it could check it.
func (c *Cache) write(k Key, m Meta, path string, stored []byte) (fileID, error) {
	h := header{key: k, meta: m, payloadCRC: crc32.Checksum(stored, castagnoli)}
	direct := c.direct.Load()
	id, err := writeEntry(c.paths, c.perm, path, h, stored, direct)
	for attempt := 0; attempt < 4 && (isNotExist(err) || errors.Is(err, fs.ErrExist)); attempt++ {
		id, err = writeEntry(c.paths, c.perm, path, h, stored, direct)
	}
	if direct && err != nil && isDirectRefused(err) {
		// The probe at Open passed, so this is one the device would not
		// take (a file system mounted over the directory since, say).
		c.n.directRefused.Add(1)
		id, err = writeEntry(c.paths, c.perm, path, h, stored, false)
	}
	if err == nil {
		return id, nil
	}
	return fileID{}, c.putFailed(k, err)
}

// Remove deletes k's entry, for example after the caller found its bytes
// fail verification under k: an entry file is unlinked (a reader that
// has it open keeps reading it); a pack record, where this process may
// write its pack, is marked removed in place and its payload's space
// given back, so that every process misses it from its next read (else
// only this one forgets it). Removing an absent entry is not an error; an
// entry of the same digest under the other algorithm stays. Remove is
// safe for concurrent use.
func (c *Cache) Remove(k Key) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if !k.valid() {
		return nil
	}
	c.removeRecord(k)
	err := os.Remove(c.paths.entry(k))
	c.forget(k)
	if err != nil && !isNotExist(err) {
		c.n.errors.Add(1)
		return fmt.Errorf("cache: remove %s: %w", k, err)
	}
	return nil
}
