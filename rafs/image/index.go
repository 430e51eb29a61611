package image

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/rafs"
	"damselfly/rafs/transport"
)

// readImage returns the image r names. When r names an image index, such
// as `convert --index` writes, it is the manifest whose platform carries
// rafs.PlatformFeature and matches the wanted platform: a plain platform
// match would pick the original image, which comes first so that runtimes
// without damselfly take it. An index without such a manifest is resolved
// as transport.ReadImage does, which gives the usual errors (no platform,
// or ErrNotRAFS once the plain image is opened).
func readImage(ctx context.Context, r transport.Ref, opts transport.Options) (v1.Image, error) {
	idx, ok, err := transport.ReadIndex(ctx, r, opts)
	if err != nil {
		return nil, err
	}
	if ok {
		img, err := rafsManifest(idx, wantPlatform(opts))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		if img != nil {
			return img, nil
		}
	}
	return transport.ReadImage(ctx, r, opts)
}

// wantPlatform is the platform an index is resolved to, as in transport:
// opts.Platform, or the running OS and architecture.
func wantPlatform(opts transport.Options) v1.Platform {
	if opts.Platform != nil {
		return *opts.Platform
	}
	return v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
}

// rafsManifest returns the first image of idx whose descriptor's platform
// has rafs.PlatformFeature and satisfies want, or nil if there is none.
// Nested indexes are not searched: convert writes a flat one.
func rafsManifest(idx v1.ImageIndex, want v1.Platform) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index manifest: %w", err)
	}
	want.Features = append(slices.Clip(want.Features), rafs.PlatformFeature)
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() || d.Platform == nil || !d.Platform.Satisfies(want) {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read image %s: %w", d.Digest, err)
		}
		return img, nil
	}
	return nil, nil
}
