package fusemount

import (
	"context"
	"fmt"

	"damselfly/fusemount/backend"
	"damselfly/rafs"
	"damselfly/rafs/runs"
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

// maxLocalRun bounds a run read from a local blob directory, checked
// before allocating its buffer: the backend chain's limit, the largest
// amplify_io.
const maxLocalRun = 64 << 20

// ReadChunksFrom makes the daemon's backend a ChunkBackend. A run from
// a local blob directory is checked as the backend chain checks one
// (runs.Check).
func (a *backendAdapter) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored []byte) error) (string, error) {
	if a.local == nil {
		src, err := a.remote.ReadChunksFrom(ctx, blob, chunks, deliver)
		return string(src), err
	}
	if len(chunks) == 0 {
		return SourceLocal, nil
	}
	run, err := runs.Check(blob, chunks, maxLocalRun)
	if err != nil {
		return SourceLocal, fmt.Errorf("read chunks of blob %s: %w", blob.Digest, err)
	}
	stored := make([]byte, run.Len())
	if err := a.local.ReadBlob(ctx, blob, int64(run.Off), stored); err != nil {
		return SourceLocal, err
	}
	for i, c := range chunks {
		if err := deliver(i, c, run.Stored(stored, c)); err != nil {
			return SourceLocal, fmt.Errorf("read chunks of blob %s: deliver chunk %d (%s): %w", blob.Digest, i, c.Digest, err)
		}
	}
	return SourceLocal, nil
}
