package backend

import (
	"context"
	"fmt"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// Authorize asks the node's peer for grants for blobs (the image's), with
// the credentials the mount uses for the registry: with them the peer
// keeps serving this mount's reads of every blob of the image while the
// registry is down, however long the mount lives. Without a proxy, or
// for an OCI layout, it does nothing. Credentials from a keychain are
// settled first (one request to the registry) so that the peer checks
// the mount's own, not anonymous access. Errors are the peer's refusals
// or failures; reads go on without grants all the same.
func (b *Backend) Authorize(ctx context.Context, blobs []rafs.Digest) error {
	if b.proxy == nil || b.reg == nil || len(blobs) == 0 {
		return nil
	}
	if b.reg.authorization() == "" {
		if err := b.reg.touch(ctx, blobs[0]); err != nil {
			return fmt.Errorf("grants: credentials: %w", err)
		}
	}
	up := registry.Ref{Registry: b.reg.origin(), Repo: b.reg.repo.RepositoryStr(), Authorization: b.reg.authorization()}
	return b.proxy.chunks.Authorize(ctx, up, blobs)
}
