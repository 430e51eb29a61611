// Package rafs implements damselfly's image format: a bootstrap that holds
// the merged metadata of a whole image, and blobs of independently
// compressed, content-addressed chunks.
//
// The parts fit together like this:
//
//   - format.go and encode.go define and write the bootstrap; bootstrap.go
//     decodes it lazily from one mapped buffer, checking every offset, size
//     and count before use, so opening costs the same for 10 or 10 million
//     files and a hostile bootstrap yields ErrCorrupt instead of a panic.
//     readbootstrap.go reads a bootstrap from a (zstd) stream: superblock
//     first, then no more than it declares, within a limit
//     (DefaultMaxBootstrapSize) and an inflation ratio, so a small layer
//     that inflates to gigabytes is refused after its first bytes.
//   - tree.go merges OCI layer tar streams (whiteouts and opaque directories
//     resolved) into one in-memory tree; chunker.go cuts file contents into
//     chunks, hashes and compresses them on all cores and appends new ones to
//     one blob per layer; builder.go drives both and emits the bootstrap.
//   - chunk.go decodes and verifies stored chunks; fs.go is a read-only
//     io/fs view over a bootstrap plus a ChunkSource; unpack.go exports the
//     tree to a directory or a tar stream.
//
// The package does no network and no FUSE I/O: callers inject blob readers
// and writers. The byte layout is documented in FORMAT.md.
package rafs
