package fusemount

import (
	"context"
	"fmt"

	"damselfly/fusemount/backend"
	"damselfly/rafs"
)

// SourceLocal is a local blob directory given with --bootstrap.
const SourceLocal = "local"

// backendAdapter puts the configured backend chain, or a local blob
// directory, behind the Fetcher's Backend interface.
type backendAdapter struct {
	remote *backend.Backend
	local  *rafs.DirBlobs
}

var _ Backend = (*backendAdapter)(nil)
var _ ChunkBackend = (*backendAdapter)(nil)

func (a *backendAdapter) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	if a.local != nil {
		return SourceLocal, a.local.ReadBlob(ctx, blob, off, p)
	}
	src, err := a.remote.ReadBlobFrom(ctx, blob, off, p)
	return string(src), err
}

func (a *backendAdapter) Close() error {
	if a.local != nil {
		return a.local.Close()
	}
	return a.remote.Close()
}

// ReadChunksFrom makes the daemon's backend a ChunkBackend.
func (a *backendAdapter) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored []byte) error) (string, error) {
	if a.local == nil {
		src, err := a.remote.ReadChunksFrom(ctx, blob, chunks, deliver)
		return string(src), err
	}
	if len(chunks) == 0 {
		return SourceLocal, nil
	}
	first, last := chunks[0], chunks[len(chunks)-1]
	off, end := first.CompressedOffset, last.CompressedOffset+uint64(last.CompressedSize)
	for i, c := range chunks {
		if c.CompressedOffset < off || c.CompressedOffset+uint64(c.CompressedSize) > end || end-off > 64<<20 {
			return SourceLocal, fmt.Errorf("read chunks of blob %s: chunk %d (%s) outside the run %d-%d", blob.Digest, i, c.Digest, off, end)
		}
	}
	stored := make([]byte, end-off)
	if err := a.local.ReadBlob(ctx, blob, int64(off), stored); err != nil {
		return SourceLocal, err
	}
	for i, c := range chunks {
		if err := deliver(i, c, stored[c.CompressedOffset-off:][:c.CompressedSize]); err != nil {
			return SourceLocal, fmt.Errorf("read chunks of blob %s: deliver chunk %d (%s): %w", blob.Digest, i, c.Digest, err)
		}
	}
	return SourceLocal, nil
}
