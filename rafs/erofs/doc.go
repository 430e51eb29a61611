// Package erofs writes the EROFS image of a RAFS bootstrap's tree, so the
// kernel's own read-only filesystem can serve an image whose chunks are
// all on the node, with no daemon on the path of a lookup, an open or a
// read (fusemount's kernel images).
//
// Build lays the image out from the bootstrap alone: a superblock, an
// extended inode per inode (hardlinks share one), directories and
// symlinks, all in memory (about 100 bytes per inode). Every regular
// file's bytes then follow, each from a block boundary, in the order of
// the files' first chunks in the blobs. WriteTo streams the whole image,
// reading file bytes from a rafs.ChunkSource (which verifies every
// chunk); ReadAt reads any range of it the same way, and Pieces says
// where any range's bytes come from. Only the uncompressed part
// of the format is used; LAYOUT.md says which fields are written and why.
// The package does no I/O of its own and imports nothing but rafs.
package erofs
