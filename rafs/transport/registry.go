package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"damselfly/rafs"
	"damselfly/rafs/registry"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	gcrtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// registryReadImage fetches the image r names, resolving an index to the
// platform in opts.
func registryReadImage(ctx context.Context, r Ref, opts Options) (v1.Image, error) {
	ref, err := registryName(r, opts)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(ref, opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, classify(err)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		return imageForPlatform(idx, opts.platform())
	}
	return desc.Image()
}

// registryReadIndex fetches the index r names, or reports false when r
// names an image.
func registryReadIndex(ctx context.Context, r Ref, opts Options) (v1.ImageIndex, bool, error) {
	ref, err := registryName(r, opts)
	if err != nil {
		return nil, false, err
	}
	desc, err := remote.Get(ref, opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, false, classify(err)
	}
	if !desc.MediaType.IsIndex() {
		return nil, false, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, false, err
	}
	return idx, true, nil
}

// registryBlobs reads the blobs of one repository through the project's
// registry client (rafs/registry), so that its token handling, retries,
// status classification and range checks apply here as everywhere. It is
// safe for concurrent use.
type registryBlobs struct {
	client *registry.Client
	ref    registry.Ref
	host   string // for errors: the registry as the reference names it
}

// newRegistryBlobs makes the client for the repository of ref, from opts:
// its base transport and User-Agent, its keychain (the client reads for
// its own user, so the node's credentials are its), and plain HTTP where ref's
// registry has scheme http (opts.Insecure, loopback, or what
// go-containerregistry takes for a local address), as ReadImage speaks
// to it. It does the handshake (ping, and a pull token where the
// registry asks for one) now; ctx bounds only the wait for it.
func newRegistryBlobs(ctx context.Context, ref name.Reference, opts Options) (*registryBlobs, error) {
	repo := ref.Context()
	host, scheme := repo.RegistryStr(), repo.Registry.Scheme()
	cfg := registry.Default()
	cfg.DefaultRegistry = scheme + "://" + host
	if scheme == "http" {
		cfg.PlainHTTP = []string{host}
	}
	rt := opts.roundTripper()
	if opts.UserAgent != "" {
		rt = gcrtransport.NewUserAgent(rt, opts.UserAgent)
	}
	client, err := registry.New(cfg, nil, registry.WithTransport(rt), registry.WithKeychain(opts.keychain()))
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", host, err)
	}
	b := &registryBlobs{client: client, ref: registry.Ref{Registry: cfg.DefaultRegistry, Repo: repo.RepositoryStr()}, host: host}
	if err := client.Authenticate(ctx, b.ref); err != nil {
		return nil, b.errorf(classify(err))
	}
	return b, nil
}

// errorf names the registry and repository in err.
func (b *registryBlobs) errorf(err error) error {
	return fmt.Errorf("registry %s repository %s: %w", b.host, b.ref.Repo, err)
}

// digest is d as rafs/registry takes it: sha256 only.
func (b *registryBlobs) digest(d v1.Hash) (rafs.Digest, error) {
	if d.Algorithm != "sha256" {
		return rafs.Digest{}, b.errorf(fmt.Errorf("%s blobs: %w", d.Algorithm, errors.ErrUnsupported))
	}
	return rafs.ParseDigest(d.String())
}

// blob streams all of blob d, verifying its digest as it is read. The
// size is -1 if the registry did not send a Content-Length.
func (b *registryBlobs) blob(ctx context.Context, d v1.Hash) (io.ReadCloser, int64, error) {
	rd, err := b.digest(d)
	if err != nil {
		return nil, 0, err
	}
	rc, size, err := b.client.OpenBlob(ctx, b.ref, rd)
	if err != nil {
		return nil, 0, b.errorf(classify(err))
	}
	vr, err := newVerifyingReader(rc, d)
	if err != nil {
		rc.Close()
		return nil, 0, err
	}
	return vr, size, nil
}

// readRange fills p with bytes [off, off+len(p)) of blob d: one ranged
// GET, and more only to resume after a transient failure.
func (b *registryBlobs) readRange(ctx context.Context, d v1.Hash, off int64, p []byte) error {
	if len(p) > registry.MaxRange {
		return fmt.Errorf("a ranged read from a registry is at most %d bytes: read the blob whole", registry.MaxRange)
	}
	rd, err := b.digest(d)
	if err != nil {
		return err
	}
	err = b.client.ReadRange(ctx, b.ref, rd, off, p)
	if errors.Is(err, registry.ErrRange) {
		err = fmt.Errorf("range extends past the end of the blob: %w", err)
	}
	if err != nil {
		return b.errorf(classify(err))
	}
	return nil
}
