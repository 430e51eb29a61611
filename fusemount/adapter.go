package fusemount

import (
	"context"

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
