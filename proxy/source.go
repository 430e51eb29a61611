package proxy

import (
	"context"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// ChunkSource serves verified chunks of RAFS blobs: the peer's node
// (peer.Node) implements it, getting each chunk from the node cache, then
// other peers, then the origin registry.
type ChunkSource interface {
	// ReadChunks gets chunks of blob (as the bootstrap describes them,
	// digests included) and calls deliver for each one, in request order,
	// with its stored bytes after they have been verified against the
	// chunk's digest. c.Flags and c.CompressedSize describe stored as
	// delivered (a peer may hold the other form). stored is valid only
	// during the call. An error from deliver stops ReadChunks and is
	// returned. On failure, the error wraps a *chunkapi.ChunkError naming the
	// first chunk not delivered; chunks before it were delivered.
	// Safe for concurrent use.
	ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
		deliver func(i int, c rafs.Chunk, stored []byte) error) error
}

// EarlyChunkSource is a ChunkSource that can hand a chunk over as soon
// as it has verified it, before it has finished keeping it (putting it
// in the node cache and announcing it), so that the batch endpoint sends
// the bytes while the source writes them. The server uses it, found by
// type assertion, for clients that accept chunkapi.ContentTypeChunksV2.
type EarlyChunkSource interface {
	ChunkSource
	// ReadChunksEarly is ReadChunks except that a chunk the source
	// fetched is delivered once verified, possibly before it is in the
	// node cache: the source puts it there itself, so the caller need not
	// (and, sharing the cache, should not).
	ReadChunksEarly(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
		deliver func(i int, c rafs.Chunk, stored []byte) error) error
}
