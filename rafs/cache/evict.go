package cache

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"
)

// Rescan rebuilds the index from the directory and, if the directory holds
// more than the high watermark, evicts least recently used entries down to
// the low watermark. Put calls it when its index crosses the high watermark
// and every (High-Low)/2 of Capacity it writes, which bounds how far
// several processes together can overshoot (see CACHE.md).
//
// Rescan holds an exclusive flock on DIR/lock throughout, so one process
// at a time rescans and evicts and each sees the others' evictions; it
// blocks while another process holds the lock. The scan stats every entry
// file and reads no content. Recency comes from file mtimes, which Get
// refreshes, merged with this process's finer-grained record of its own
// uses. Evicting unlinks files: readers that have one open keep reading,
// later readers get ErrNotFound. It also deletes stale temp files and
// files of impossible sizes. Rescan is safe for concurrent use; Get and
// Put proceed during the scan.
func (c *Cache) Rescan() error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	return c.rescanLocked()
}

// evictFromPut runs a rescan for Put, unless one is already running in
// this Cache: Put does not wait for another goroutine's eviction.
func (c *Cache) evictFromPut() {
	if !c.evictMu.TryLock() {
		return
	}
	defer c.evictMu.Unlock()
	if c.closed.Load() {
		return
	}
	if err := c.rescanLocked(); err != nil {
		c.log.Warn("cache: eviction failed", "dir", c.cfg.Dir, "err", err)
	}
}

// afterScan, when set (by tests only), runs after a rescan has read the
// directory and before it updates the index.
var afterScan func()

// victim is an entry file or a pack (p set) to evict.
type victim struct {
	key  Key
	p    *packFile
	size int64
	used int64
}

// rescanLocked is Rescan; the caller holds evictMu.
func (c *Cache) rescanLocked() error {
	unlock, err := lockDir(c.paths, c.perm)
	if err != nil {
		c.n.errors.Add(1)
		return err
	}
	defer unlock()

	start := time.Now()
	c.mu.Lock()
	since := c.idx.seq
	writtenBefore := c.written
	c.mu.Unlock()
	res, err := scanDir(c.paths, c.perm, start)
	if err != nil {
		c.n.errors.Add(1)
		return err
	}
	c.refreshPacks()
	if afterScan != nil {
		afterScan()
	}
	c.n.corrupt.Add(uint64(res.corrupt))
	c.entryFiles.Store(len(res.entries) > 0 || c.direct.Load() || c.cfg.entryFiles)

	c.mu.Lock()
	inPacks, units := c.packScannedLocked()
	c.idx.rebuild(append(res.entries, inPacks...), since)
	c.written -= writtenBefore
	scannedBytes := c.idx.bytes
	var victims []victim
	if c.high > 0 && c.idx.bytes > c.high && !c.readOnly {
		victims = c.victimsLocked(units)
	}
	c.mu.Unlock()

	n, bytes := c.unlink(victims)
	level := c.log.Debug
	if n > 0 || res.corrupt > 0 || res.temps > 0 {
		level = c.log.Info
	}
	if res.fixed > 0 {
		c.log.Warn("cache: set file permissions", "dir", c.cfg.Dir, "files", res.fixed,
			"mode", c.perm.file.String(), "gid", c.perm.gid)
	}
	level("cache: rescanned", "dir", c.cfg.Dir, "entries", len(res.entries), "bytes", scannedBytes,
		"evicted", n, "evicted_bytes", bytes, "bad_size_deleted", res.corrupt,
		"stale_temps_deleted", res.temps, "took", time.Since(start))
	return nil
}

// unlink deletes the victims' files and counts what it deleted. A file
// already gone was deleted by someone else and is not counted.
func (c *Cache) unlink(victims []victim) (n int, bytes int64) {
	var gone []Key
	defer func() {
		if f := c.onEvict.Load(); f != nil && len(gone) > 0 {
			(*f)(gone)
		}
	}()
	for _, v := range victims {
		if v.p != nil {
			keys, err := c.removePack(v.p)
			if err != nil {
				c.n.errors.Add(1)
				c.log.Warn("cache: evict", "pack", v.p.name, "err", fmt.Errorf("unlink: %w", err))
				continue
			}
			for _, k := range keys {
				c.hot.forget(k)
				c.vouched.forget(k)
			}
			n += len(keys)
			bytes += v.size
			gone = append(gone, keys...)
			continue
		}
		err := os.Remove(c.paths.entry(v.key))
		c.hot.forget(v.key)
		switch {
		case err == nil:
			n++
			bytes += v.size
			gone = append(gone, v.key)
		case !isNotExist(err):
			c.n.errors.Add(1)
			c.log.Warn("cache: evict", "key", v.key, "err", fmt.Errorf("unlink: %w", err))
		}
	}
	c.n.evictions.Add(uint64(n))
	c.n.evictedBytes.Add(uint64(bytes))
	return n, bytes
}

// victimsLocked picks what to evict, least recently used first, until
// what stays is within the low watermark: entry files one by one (their
// index entries leave the index here), packs whole (with every record in
// them; they leave when unlinked). The bytes counted are the index's for
// entry files and the file sizes for packs. Under c.mu.
func (c *Cache) victimsLocked(units []packUnit) []victim {
	var cands []victim
	total := int64(0)
	for _, e := range c.idx.lru.Values() {
		if _, inPack := c.packs.locs[e.key]; inPack {
			continue
		}
		cands = append(cands, victim{key: e.key, size: e.size, used: e.used})
		total += e.size
	}
	for _, u := range units {
		cands = append(cands, victim{p: u.p, size: u.size, used: u.used})
		total += u.size
	}
	slices.SortStableFunc(cands, func(a, b victim) int { return cmp.Compare(a.used, b.used) })
	var out []victim
	for _, v := range cands {
		if total <= c.low {
			break
		}
		if v.p == nil {
			c.idx.remove(v.key)
		}
		out = append(out, v)
		total -= v.size
	}
	return out
}
