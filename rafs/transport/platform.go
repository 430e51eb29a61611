package transport

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// maxIndexDepth bounds the descent through nested indexes, so a malicious
// or cyclic index cannot recurse forever.
const maxIndexDepth = 4

// imageForPlatform returns the first image in idx, or in an index nested in
// it, whose platform satisfies want (fields left empty in want match
// anything). A descriptor without a platform is judged by its image's config.
// When nothing matches, the error wraps [ErrNoPlatform] and lists the
// platforms that are available.
func imageForPlatform(idx v1.ImageIndex, want v1.Platform) (v1.Image, error) {
	var avail []string
	img, err := findPlatform(idx, want, 0, &avail)
	if err != nil {
		return nil, err
	}
	if img == nil {
		list := "none"
		if len(avail) > 0 {
			list = strings.Join(avail, ", ")
		}
		return nil, fmt.Errorf("%w %s (available: %s)", ErrNoPlatform, want, list)
	}
	return img, nil
}

// findPlatform does the search for imageForPlatform, appending each
// platform it sees to avail. It returns a nil image when nothing matches.
func findPlatform(idx v1.ImageIndex, want v1.Platform, depth int, avail *[]string) (v1.Image, error) {
	if depth > maxIndexDepth {
		return nil, fmt.Errorf("image indexes nested more than %d deep", maxIndexDepth)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index manifest: %w", err)
	}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("read nested index %s: %w", d.Digest, err)
			}
			img, err := findPlatform(child, want, depth+1, avail)
			if img != nil || err != nil {
				return img, err
			}
		case d.MediaType.IsImage():
			p := d.Platform
			var img v1.Image
			if p == nil {
				if img, err = idx.Image(d.Digest); err != nil {
					return nil, fmt.Errorf("read image %s: %w", d.Digest, err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					return nil, fmt.Errorf("read config of image %s: %w", d.Digest, err)
				}
				p = cf.Platform()
			}
			if p == nil {
				continue
			}
			if !p.Satisfies(want) {
				// Attestation manifests (unknown/unknown) are not platforms.
				if s := p.String(); s != "" && p.OS != "unknown" {
					*avail = append(*avail, s)
				}
				continue
			}
			if img == nil {
				if img, err = idx.Image(d.Digest); err != nil {
					return nil, fmt.Errorf("read image %s: %w", d.Digest, err)
				}
			}
			return img, nil
		}
	}
	return nil, nil
}
