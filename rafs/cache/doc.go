// Package cache is the node chunk cache: one directory per node that holds
// every chunk the node has fetched, shared by the mount daemons and the peer
// daemon so that a chunk is stored once per node.
//
// Entries are content addressed by a Key: the chunk digest (of the
// uncompressed bytes) and its algorithm, SHA-256 or BLAKE3, both part of
// the chunk's identity; a lookup under the other algorithm is a miss.
// They hold the chunk's stored bytes as they are in the blob, behind a
// small checksummed header, as records appended to pack files (one writer
// per pack; the default) or as one file per entry (direct I/O, and
// releases before packs); CACHE.md documents the layout. The parts:
//
//   - key.go is Key, an entry's identity; legacy.go finds the BLAKE3
//     entries of the release before, which had no algorithm in the key.
//   - format.go encodes and checks the entry header; paths.go names files;
//     perm.go gives what the cache creates its modes and group.
//   - entry.go reads and writes one entry file: temp file and rename to
//     write, header, size and CRC checks to read.
//   - pack.go appends records to this process's pack, finds the records
//     other processes append to theirs, reads and evicts packs.
//   - index.go is this process's LRU view of the directory, with byte
//     counts; scan.go rebuilds it from the directory.
//   - evict.go runs rescans and eviction under an exclusive flock on
//     DIR/lock (lock.go), so that several processes sharing the directory
//     keep it within capacity.
//   - config.go, cache.go, get.go, put.go and stats.go are the public API;
//     chunk.go adds ReadChunk and PutChunk, which speak rafs.Chunk.
//
// Several processes may open the same directory at once. Each keeps its own
// index, knowing its own puts and what it last scanned; recency is shared
// through file mtimes, which Get refreshes at most once a minute per entry.
// Nothing a reader holds is invalidated by eviction: unlinking a file leaves
// open descriptors readable, and a reader that finds a file gone gets
// ErrNotFound and refetches. An entry file that fails any check is deleted,
// a pack record that does is forgotten, and either is reported as not
// found, never returned.
package cache
