// Package fusemount is the mount daemon: one read-only FUSE filesystem for
// a whole RAFS image, mounted as soon as the bootstrap is local, fetching
// chunk data only when something reads it.
//
// The parts: fs.go answers the kernel straight from the mapped bootstrap
// (go-fuse raw API, node ID = inode number); fetcher.go is the read path
// (memory, the node cache of package rafs/cache, then the backend chain of
// fusemount/backend), with one fetch per chunk however many readers wait
// (flight.go: runs of chunks in a rafs/flight group), merging of adjacent
// misses (a miss and the missing chunks stored after it, planned by
// rafs/runs' Extend) and readahead; prefetch.go warms the cache after
// mounting; passthrough.go and filecopies.go serve warm files through
// the kernel (below); daemon.go ties the lifecycle to the mount (no orphans, stale
// mounts detached); api.go serves status and Prometheus metrics on a unix
// socket.
//
// Warm files (file_copies, off by default: configs/mount.yaml says what
// they cost): once every chunk of a regular file is on the node, a
// background fill writes the file's decoded content, from those verified
// chunks only, into the file copy store (DIR/files beside the node
// cache, bounded, least recently opened out first), named by a digest of
// the file's chunk list so that hardlinks and identical files in any
// image share one copy. The fill is queued when the last handle opened
// through the daemon closes (a `cat`, an import, a mapped library), and
// never fetches. An open of a file whose copy is there, of the right
// size, is answered in FUSE passthrough mode with the copy registered as
// its backing file: the kernel then reads and maps the copy itself, and
// no READ for it reaches the daemon. The kernel keeps an inode in one
// mode at a time (mixing fails the open with EIO), so opens join the
// mode of the handles already open. The node cache is untouched: peers
// are still served compressed chunks from it. Passthrough needs an OPEN
// to answer, so with file copies the daemon does not use the kernel's
// open-less reads; without a kernel that grants passthrough, or a
// privileged daemon, every read goes through the daemon as before.
// A copy is checked for its size at every open and never hashed again
// after it is written: its bytes come from verified chunks, and it is
// protected as the node cache is, by the directory's permissions.
//
// Why the fill runs when the last handle closes rather than when a file
// was read to its end: a library that ld.so or Python maps is read only
// in part, yet its chunks are all in the node cache once the image has
// been read or prefetched, and it is the large mapped files that gain
// most. What passthrough does not remove is the per-file cost: every
// open of a warm file is an OPEN and a RELEASE round trip (open-less
// reads had a READ instead), so a tree of small files gains little;
// large files and mappings are read at local-disk speed.
package fusemount
