package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/rafs"
	"damselfly/rafs/image"
	"damselfly/rafs/transport"
)

// ErrNotInManifest is returned when the layer digest containerd names is
// not a layer of the manifest it names.
var ErrNotInManifest = errors.New("layer not in manifest")

// layerKind says what a layer of a manifest is to the snapshotter:
// layerBlob, layerBootstrap, or "" for an ordinary (tar) layer that
// containerd downloads and applies.
//
// A manifest is RAFS when it carries rafs.AnnotationVersion or any layer
// has a RAFS media type, current or legacy (rafs/FORMAT.md, "In an OCI
// manifest"). In a RAFS manifest every layer must be a RAFS blob or the
// bootstrap: anything else is an error, never a layer containerd would
// try to untar.
func layerKind(m *v1.Manifest, layer string) (string, error) {
	isRAFS := m.Annotations[rafs.AnnotationVersion] != ""
	var found *v1.Descriptor
	for i := range m.Layers {
		l := &m.Layers[i]
		if rafs.IsMediaType(string(l.MediaType)) {
			isRAFS = true
		}
		if l.Digest.String() == layer && found == nil {
			found = l
		}
	}
	if found == nil {
		return "", fmt.Errorf("%s: %w", layer, ErrNotInManifest)
	}
	switch mt := string(found.MediaType); {
	case rafs.IsBlobMediaType(mt):
		return layerBlob, nil
	case rafs.IsBootstrapMediaType(mt):
		return layerBootstrap, nil
	}
	if isRAFS {
		return "", fmt.Errorf("layer %s of a RAFS manifest has media type %q, neither a RAFS blob nor a bootstrap", layer, found.MediaType)
	}
	return "", nil
}

// Registry is where the snapshotter reads manifests and bootstraps.
type Registry interface {
	// Manifest returns the manifest of image (docker://HOST/REPO@DIGEST),
	// checked against the digest. It may block on the network; it is safe
	// for concurrent use; the caller must not modify the result.
	Manifest(ctx context.Context, image string) (*v1.Manifest, error)
	// CheckBootstrap fetches the bootstrap of the RAFS image and verifies
	// it as a mount would (rafs/image): digest, size, format, and that it
	// names the manifest's blobs. An error says what is wrong.
	CheckBootstrap(ctx context.Context, image string) error
	// Index returns the image index ref (docker://HOST/REPO:TAG or
	// @DIGEST) names, with true; false when it names a single manifest.
	// It may block on the network; it is safe for concurrent use.
	Index(ctx context.Context, ref string) (*v1.IndexManifest, bool, error)
	// Config returns the config of image (docker://HOST/REPO@DIGEST),
	// checked against the digest its manifest gives.
	Config(ctx context.Context, image string) (*v1.ConfigFile, error)
	// Blob opens the blob with digest in image's repository. Reading it
	// to the end fails if the bytes do not match the digest. The caller
	// closes it.
	Blob(ctx context.Context, image, digest string) (io.ReadCloser, error)
}

// registryClient is the Registry of the repo's own clients
// (rafs/transport over go-containerregistry, credentials from the
// node's docker config), with a small cache of manifests: containerd
// asks about every layer of an image in turn.
type registryClient struct {
	opts          transport.Options
	maxBootstrap  int64
	mu            sync.Mutex
	manifests     map[string]*v1.Manifest
	manifestOrder []string
}

var _ Registry = (*registryClient)(nil)

// maxCachedManifests bounds the manifest cache.
const maxCachedManifests = 64

// NewRegistry returns the Registry that reads through rafs/transport
// with opts, refusing bootstraps that inflate past maxBootstrap bytes
// (0: rafs.DefaultMaxBootstrapSize).
func NewRegistry(opts transport.Options, maxBootstrap int64) Registry {
	return &registryClient{opts: opts, maxBootstrap: maxBootstrap, manifests: map[string]*v1.Manifest{}}
}

func (c *registryClient) Manifest(ctx context.Context, ref string) (*v1.Manifest, error) {
	c.mu.Lock()
	m, ok := c.manifests[ref]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	r, err := transport.Parse(ref, c.opts)
	if err != nil {
		return nil, err
	}
	img, err := transport.ReadImage(ctx, r, c.opts)
	if err != nil {
		return nil, err
	}
	m, err = img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", ref, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.manifests[ref]; !ok {
		if len(c.manifestOrder) >= maxCachedManifests {
			delete(c.manifests, c.manifestOrder[0])
			c.manifestOrder = c.manifestOrder[1:]
		}
		c.manifests[ref] = m
		c.manifestOrder = append(c.manifestOrder, ref)
	}
	return m, nil
}

func (c *registryClient) CheckBootstrap(ctx context.Context, ref string) error {
	img, err := image.Open(ctx, ref, image.Options{Transport: c.opts, MaxBootstrapSize: c.maxBootstrap})
	if err != nil {
		return err
	}
	return img.Close()
}

func (c *registryClient) Index(ctx context.Context, ref string) (*v1.IndexManifest, bool, error) {
	r, err := transport.Parse(ref, c.opts)
	if err != nil {
		return nil, false, err
	}
	idx, ok, err := transport.ReadIndex(ctx, r, c.opts)
	if err != nil || !ok {
		return nil, false, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, false, fmt.Errorf("index %s: %w", ref, err)
	}
	return im, true, nil
}

// image reads the image ref names by digest.
func (c *registryClient) image(ctx context.Context, ref string) (v1.Image, error) {
	r, err := transport.Parse(ref, c.opts)
	if err != nil {
		return nil, err
	}
	return transport.ReadImage(ctx, r, c.opts)
}

func (c *registryClient) Config(ctx context.Context, ref string) (*v1.ConfigFile, error) {
	img, err := c.image(ctx, ref)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", ref, err)
	}
	return cf, nil
}

func (c *registryClient) Blob(ctx context.Context, ref, digest string) (io.ReadCloser, error) {
	img, err := c.image(ctx, ref)
	if err != nil {
		return nil, err
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, err
	}
	l, err := img.LayerByDigest(h)
	if err != nil {
		return nil, fmt.Errorf("layer %s of %s: %w", digest, ref, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("layer %s of %s: %w", digest, ref, err)
	}
	return rc, nil
}
