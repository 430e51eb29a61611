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
// mounting; daemon.go ties the lifecycle to the mount (no orphans, stale
// mounts detached); api.go serves status and Prometheus metrics on a unix
// socket.
package fusemount
