package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"damselfly/rafs/bufpool"
)

// touchInterval throttles the mtime refresh that makes a read visible to
// other processes' eviction: at most one utimensat per entry per interval.
const touchInterval = time.Minute

// Get puts k's stored bytes in dst[:n] and returns them with their
// metadata. The result aliases dst when its capacity suffices, and is
// otherwise a buffer from rafs/bufpool that the caller owns and may give
// back (bufpool.Put); the cache keeps no reference to either. Get checks the header and the payload's
// CRC32-C, not the chunk digest (ReadChunk does).
//
// It returns ErrNotFound when the cache does not hold k: never put,
// evicted, deleted by hand (even the whole directory), or deleted by Get
// itself because the file failed a check (counted in Stats.Corrupt). Other
// errors are I/O failures of the cache's disk; callers treat them as a
// miss too. An entry of the same digest under the other algorithm is not
// k's: Get misses, and leaves it alone (but a BLAKE3 key takes over an
// entry the release before wrote for it, once its bytes verify as k's
// chunk: adoptLegacy). A hit makes k the most recently used entry, here and, through
// the file's mtime (refreshed at most once a minute), for every process
// that shares the directory. Get may block on disk I/O; it is safe for
// concurrent use, also with eviction: a file unlinked while it is read
// stays readable.
func (c *Cache) Get(k Key, dst []byte) (Meta, []byte, error) {
	m, out, _, err := c.get(k, dst)
	return m, out, err
}

// get is Get, also giving the state of the entry file the bytes were
// read from: zero when they came from memory.
func (c *Cache) get(k Key, dst []byte) (Meta, []byte, fileID, error) {
	if c.closed.Load() {
		return Meta{}, nil, fileID{}, ErrClosed
	}
	if !k.valid() {
		return Meta{}, nil, fileID{}, fmt.Errorf("%w: %s: unknown digest algorithm", ErrNotFound, k)
	}
	var m Meta
	var out []byte
	if c.hot.get(k, func(hm Meta, stored []byte, kept time.Time) {
		m, out = hm, fill(dst, stored)
		c.usedHot(k, kept)
	}) {
		return m, out, fileID{}, nil
	}
	for attempt := 0; ; attempt++ {
		if m, out, id, found, err := c.getPack(k, dst); found {
			if err != nil {
				c.n.misses.Add(1)
				return Meta{}, nil, fileID{}, err
			}
			c.n.hits.Add(1)
			c.hot.keep(k, m, out)
			return m, out, id, nil
		}
		if c.entryFiles.Load() {
			if m, out, id, absent, err := c.getEntry(k, dst); !absent {
				return m, out, id, err
			}
		}
		if attempt > 0 || !c.refreshOnMiss() {
			break
		}
	}
	c.n.misses.Add(1)
	return Meta{}, nil, fileID{}, ErrNotFound
}

// getEntry is get's look at k's entry file; absent reports that there is
// none (not counted as a miss: get goes on looking).
func (c *Cache) getEntry(k Key, dst []byte) (m Meta, out []byte, id fileID, absent bool, err error) {
	path := c.paths.entry(k)
	e, err := openEntry(path, k, c.direct.Load())
	if e != nil {
		defer e.Close()
	}
	if err == nil {
		out, err = e.readPayload(dst)
	}
	if err != nil && isNotExist(err) {
		if m, out, ok := c.adoptLegacy(k, dst); ok {
			c.n.hits.Add(1)
			return m, out, fileID{}, false, nil
		}
		c.forgetEntry(k)
		return Meta{}, nil, fileID{}, true, ErrNotFound
	}
	if err != nil {
		c.n.misses.Add(1)
		return Meta{}, nil, fileID{}, false, c.readFailed(k, path, e, err)
	}
	id, _ = idOf(e.fi)
	c.used(k, path, e.fi)
	c.n.hits.Add(1)
	c.hot.keep(k, e.hdr.meta, out)
	return e.hdr.meta, out, id, false, nil
}

// GetVerified is Get for a caller that checks what it reads: verify
// is called with the entry's bytes unless this Cache knows them to be
// right already, because it wrote the entry file (Put's caller had
// verified them) or an earlier GetVerified verified that same file, and
// the file has not changed since (its inode and ctime: see vouch.go).
// Bytes verify rejects make the entry corrupt: it is deleted (unless
// replaced meanwhile), counted in Stats.Corrupt and reported as
// ErrNotFound, so the caller fetches the chunk again. Bytes from memory
// (Config.HotBytes) or from a legacy entry are always verified.
func (c *Cache) GetVerified(k Key, dst []byte, verify func(Meta, []byte) error) (Meta, []byte, error) {
	m, out, id, err := c.get(k, dst)
	if err != nil {
		return m, out, err
	}
	if id != (fileID{}) && c.vouched.has(k, id) {
		c.n.vouchedHits.Add(1)
		return m, out, nil
	}
	if verr := verify(m, out); verr != nil {
		c.n.corrupt.Add(1)
		c.forget(k)
		switch {
		case id.ctimeSec == -1:
			// A pack record: forgotten here (forget did), and left in
			// its pack, which other processes read with their own checks.
		case id != (fileID{}):
			c.removeIf(k, id)
		default:
			_ = os.Remove(c.paths.entry(k))
		}
		c.log.Warn("cache: deleted entry that fails verification", "key", k, "err", verr)
		return Meta{}, nil, fmt.Errorf("%w: %s: deleted entry that fails verification: %v", ErrNotFound, k, verr)
	}
	if id != (fileID{}) {
		c.vouched.add(k, id)
	}
	return m, out, nil
}

// removeIf deletes k's entry file if it is still the one id describes
// (not replaced by a fresh write since it was read).
func (c *Cache) removeIf(k Key, id fileID) {
	path := c.paths.entry(k)
	fi, err := os.Lstat(path)
	if err != nil {
		return
	}
	if now, ok := idOf(fi); !ok || now.dev != id.dev || now.ino != id.ino {
		return
	}
	if err := os.Remove(path); err != nil && !isNotExist(err) {
		c.n.errors.Add(1)
		c.log.Warn("cache: delete corrupt entry", "path", path, "err", err)
	}
}

// usedHot records a hit on k served from hot memory, whose file's mtime
// was last refreshed (by this Cache) at kept: most recently used in the
// index, and in the file's mtime when kept is older than touchInterval.
func (c *Cache) usedHot(k Key, kept time.Time) {
	now := time.Now()
	if now.Sub(kept) >= touchInterval {
		_ = os.Chtimes(c.paths.entry(k), time.Time{}, now)
		c.hot.touched(k, now)
	}
	c.mu.Lock()
	c.idx.touch(k, now.UnixNano())
	c.mu.Unlock()
	c.n.hits.Add(1)
	c.n.hotHits.Add(1)
}

// Has reports whether the cache holds k now: a record in a pack this
// process knows, or an entry file. When neither is found, other
// processes' packs are looked at again first (refreshOnMiss). It does not
// read or check the bytes, nor count
// as a use.
func (c *Cache) Has(k Key) bool {
	if c.closed.Load() || !k.valid() {
		return false
	}
	for attempt := 0; ; attempt++ {
		if c.hasPack(k) {
			return true
		}
		if c.entryFiles.Load() {
			fi, err := os.Lstat(c.paths.entry(k))
			if err == nil && fi.Mode().IsRegular() {
				return true
			}
			if err != nil && isNotExist(err) {
				c.forgetEntry(k)
			}
		}
		if attempt > 0 || !c.refreshOnMiss() {
			return false
		}
	}
}

// readFailed turns a failure to read k's entry at path into Get's error.
// A missing file is ErrNotFound. A corrupt one is deleted (unless e shows
// that the file now at path is another one, put since it was opened) and
// reported as ErrNotFound. Anything else is an I/O error.
func (c *Cache) readFailed(k Key, path string, e *entryFile, err error) error {
	switch {
	case isNotExist(err):
		c.forgetEntry(k)
		return ErrNotFound
	case errors.Is(err, errCorrupt):
		c.discard(k, path, e)
		c.log.Warn("cache: deleted corrupt entry", "key", k, "path", path, "err", err)
		return fmt.Errorf("%w: %s: deleted corrupt entry: %v", ErrNotFound, k, err)
	}
	c.n.errors.Add(1)
	return fmt.Errorf("cache: read %s: %w", k, err)
}

// discard deletes the corrupt file at path that e (if not nil) has open,
// and forgets k.
func (c *Cache) discard(k Key, path string, e *entryFile) {
	c.n.corrupt.Add(1)
	c.forget(k)
	if e != nil && e.fi != nil {
		if now, err := os.Lstat(path); err != nil || !os.SameFile(now, e.fi) {
			return // gone, or replaced by a fresh write
		}
	}
	if err := os.Remove(path); err != nil && !isNotExist(err) {
		c.n.errors.Add(1)
		c.log.Warn("cache: delete corrupt entry", "path", path, "err", err)
	}
}

// used records a hit on k, whose file at path fi describes: most recently
// used in the index, and in the file's mtime when that is older than
// touchInterval.
func (c *Cache) used(k Key, path string, fi fs.FileInfo) {
	now := time.Now()
	if now.Sub(fi.ModTime()) >= touchInterval {
		// Best effort: the file may be gone, or owned by another user.
		_ = os.Chtimes(path, time.Time{}, now)
	}
	c.mu.Lock()
	if !c.idx.touch(k, now.UnixNano()) {
		c.idx.add(k, fi.Size(), now.UnixNano()) // another process put it
	}
	c.mu.Unlock()
}

// isNotExist reports whether err means that a file or a directory above it
// is missing.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// fill copies b into dst, or into a buffer from rafs/bufpool when dst's
// capacity is too small, and returns the copy.
func fill(dst, b []byte) []byte {
	if cap(dst) >= len(b) {
		dst = dst[:len(b)]
	} else {
		dst = bufpool.Get(len(b))
	}
	copy(dst, b)
	return dst
}
