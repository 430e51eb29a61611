package cache

import "sync/atomic"

// Stats is a snapshot of a Cache's counters. Entries and Bytes describe
// this process's index (see Keys); the counters count since Open, in
// this process only.
type Stats struct {
	Entries  int   // entries in the index
	Packs    int   // pack files this process knows (pack.go)
	Bytes    int64 // bytes of their files, headers included
	Capacity int64 // Config.Capacity; 0 means unlimited

	Hits         uint64 // Get and ReadChunk calls that returned a chunk
	Misses       uint64 // Get and ReadChunk calls that did not
	Puts         uint64 // successful Put and PutChunk calls
	Evictions    uint64 // entry files this process deleted to make room
	EvictedBytes uint64 // bytes of those files
	Corrupt      uint64 // entry files deleted because they failed a check
	Errors       uint64 // I/O failures, ENOSPC included
	// Direct reports whether entry files are read and written with direct
	// I/O (Config.DirectIO, where the file system takes it);
	// DirectRefused counts direct writes the kernel refused after Open,
	// done again buffered.
	Direct        bool
	DirectRefused uint64
	// HotHits counts the Hits served from memory (Config.HotBytes);
	// HotEntries and HotBytes are what that memory holds now.
	HotHits    uint64
	HotEntries int
	HotBytes   int64
	// VouchedHits counts the GetVerified calls that returned an entry
	// without calling verify: its file was written, or verified, by this
	// Cache and has not changed since.
	VouchedHits uint64
}

type counters struct {
	hits, misses, puts      atomic.Uint64
	evictions, evictedBytes atomic.Uint64
	corrupt, errors         atomic.Uint64
	directRefused, hotHits  atomic.Uint64
	vouchedHits             atomic.Uint64
}

// Stats returns a snapshot of the counters. It is cheap and safe to call
// at any time, also after Close.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	entries, bytes, packs := c.idx.len(), c.idx.bytes, len(c.packs.files)
	c.mu.Unlock()
	hotEntries, hotBytes := c.hot.stats()
	return Stats{
		Entries:       entries,
		Packs:         packs,
		Bytes:         bytes,
		Capacity:      c.cfg.Capacity,
		Hits:          c.n.hits.Load(),
		Misses:        c.n.misses.Load(),
		Puts:          c.n.puts.Load(),
		Evictions:     c.n.evictions.Load(),
		EvictedBytes:  c.n.evictedBytes.Load(),
		Corrupt:       c.n.corrupt.Load(),
		Errors:        c.n.errors.Load(),
		Direct:        c.direct.Load(),
		DirectRefused: c.n.directRefused.Load(),
		HotHits:       c.n.hotHits.Load(),
		HotEntries:    hotEntries,
		HotBytes:      hotBytes,
		VouchedHits:   c.n.vouchedHits.Load(),
	}
}
