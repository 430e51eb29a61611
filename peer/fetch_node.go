package peer

import (
	"context"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
)

// ReadChunks implements proxy.ChunkSource through the fetch engine: hits
// from the node cache, misses from peers and the origin, each chunk
// delivered once it is cached and announced (fetch.Engine.ReadChunks).
func (n *Node) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return n.eng.ReadChunks(ctx, up, blob, chunks, deliver)
}

// ReadChunksEarly implements proxy.EarlyChunkSource: ReadChunks
// delivering each fetched chunk as soon as it is verified, while the
// node caches and announces it.
func (n *Node) ReadChunksEarly(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return n.eng.ReadChunksEarly(ctx, up, blob, chunks, deliver)
}

// Hold implements fetch.Holdings: it records that the node holds chunk
// ordinal of blob under key k, and reports whether that is news.
func (n *Node) Hold(blob rafs.Digest, ordinal uint32, k cache.Key) bool {
	return n.hold.add(blob, ordinal, k)
}

// Unhold implements plain.Holdings: it forgets chunks ordinals of blob
// and tells the Router.
func (n *Node) Unhold(blob rafs.Digest, ordinals []uint32) {
	n.hold.remove(blob, ordinals)
	n.router.Drop(blob, ordinals)
}
