package transport

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ReadImage returns the image r names. An image index is resolved to
// opts.Platform; if no image matches, the error wraps [ErrNoPlatform] and
// lists the platforms available. An oci: reference without a tag takes the
// layout's only manifest, and fails listing the tags if there are several.
// A missing tag, manifest or layout gives an error wrapping [ErrNotFound].
// The image's blobs are fetched lazily, as its methods are called.
func ReadImage(ctx context.Context, r Ref, opts Options) (v1.Image, error) {
	img, err := readImage(ctx, r, opts)
	if err != nil {
		return nil, opError("read image", r, err)
	}
	return img, nil
}

func readImage(ctx context.Context, r Ref, opts Options) (v1.Image, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch r.Transport {
	case OCI:
		return ociReadImage(r, opts.platform())
	case DockerArchive:
		return archiveReadImage(r)
	case Docker:
		return registryReadImage(ctx, r, opts)
	default:
		return nil, unknownTransport(r)
	}
}

// ReadIndex returns the top-level object r names when it is an image index,
// with true, and (nil, false, nil) when it is a single image; a
// docker-archive never holds an index. It selects within an oci: layout as
// [ReadImage] does.
func ReadIndex(ctx context.Context, r Ref, opts Options) (v1.ImageIndex, bool, error) {
	idx, ok, err := readIndex(ctx, r, opts)
	if err != nil {
		return nil, false, opError("read index", r, err)
	}
	return idx, ok, nil
}

func readIndex(ctx context.Context, r Ref, opts Options) (v1.ImageIndex, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	switch r.Transport {
	case OCI:
		return ociReadIndex(r)
	case DockerArchive:
		return nil, false, nil
	case Docker:
		return registryReadIndex(ctx, r, opts)
	default:
		return nil, false, unknownTransport(r)
	}
}
