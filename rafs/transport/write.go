package transport

import (
	"context"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteImage stores img where r names.
//
// For oci: the layout at r.Path is created if missing, and the manifest is
// recorded under r.Tag, replacing any manifest with the same tag, so writing
// again is idempotent and the layout does not grow duplicates. For docker://
// the image is pushed. For docker-archive: the tarball is replaced
// atomically and records r.Tag, or [DefaultArchiveTag] when r has none.
func WriteImage(ctx context.Context, r Ref, img v1.Image, opts Options) error {
	if err := writeImage(ctx, r, img, opts); err != nil {
		return opError("write image", r, err)
	}
	return nil
}

func writeImage(ctx context.Context, r Ref, img v1.Image, opts Options) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch r.Transport {
	case OCI:
		l, err := ociOpen(r.Path)
		if err != nil {
			return err
		}
		if err := ociLinkBlobs(r.Path, img); err != nil {
			return err
		}
		if err := l.WriteImage(img); err != nil {
			return err
		}
		return ociAdd(r.Path, img, r.Tag)
	case DockerArchive:
		return archiveWriteImage(r, img)
	case Docker:
		ref, err := registryName(r, opts)
		if err != nil {
			return err
		}
		return classify(remote.Write(ref, img, opts.remoteOptions(ctx)...))
	default:
		return unknownTransport(r)
	}
}

// WriteIndex stores idx, with every image and index it refers to, where r
// names; oci: replaces a manifest with the same tag as [WriteImage] does.
// docker-archive cannot hold an index: that error wraps
// [errors.ErrUnsupported].
func WriteIndex(ctx context.Context, r Ref, idx v1.ImageIndex, opts Options) error {
	if err := writeIndex(ctx, r, idx, opts); err != nil {
		return opError("write index", r, err)
	}
	return nil
}

func writeIndex(ctx context.Context, r Ref, idx v1.ImageIndex, opts Options) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch r.Transport {
	case OCI:
		l, err := ociOpen(r.Path)
		if err != nil {
			return err
		}
		if err := l.WriteIndex(idx); err != nil {
			return err
		}
		return ociAdd(r.Path, idx, r.Tag)
	case DockerArchive:
		return fmt.Errorf("docker-archive cannot hold an image index: %w", errors.ErrUnsupported)
	case Docker:
		ref, err := registryName(r, opts)
		if err != nil {
			return err
		}
		return classify(remote.WriteIndex(ref, idx, opts.remoteOptions(ctx)...))
	default:
		return unknownTransport(r)
	}
}
