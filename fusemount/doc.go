// Package fusemount will hold the mount daemon: the go-fuse adapter over
// the rafs view, the read path with range merging and prefetch, and the
// backend chain (local peer, then registry). It is built by the
// "fusemount" issue.
package fusemount
