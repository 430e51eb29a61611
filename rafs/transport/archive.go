package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultArchiveTag is the image reference recorded in a docker-archive
// written from a reference without one, so `docker load` gives the image a
// name rather than leaving it dangling.
const DefaultArchiveTag = "damselfly:latest"

// archiveTag returns the image reference inside the tarball that r names,
// or nil when r names none.
func archiveTag(r Ref) (*name.Tag, error) {
	if r.Tag == "" {
		return nil, nil
	}
	t, err := name.NewTag(r.Tag)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReference, err)
	}
	return &t, nil
}

// archiveReadImage opens the image r names in a `docker save` tarball.
// Without a tag the tarball must hold exactly one image.
func archiveReadImage(r Ref) (v1.Image, error) {
	tag, err := archiveTag(r)
	if err != nil {
		return nil, err
	}
	img, err := tarball.ImageFromPath(r.Path, tag)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return img, err
}

// archiveWriteImage writes img as a `docker save` tarball at r.Path,
// replacing any file there atomically.
func archiveWriteImage(r Ref, img v1.Image) error {
	tag, err := archiveTag(r)
	if err != nil {
		return err
	}
	if tag == nil {
		t, err := name.NewTag(DefaultArchiveTag)
		if err != nil {
			return err
		}
		tag = &t
	}
	return writeFileAtomic(r.Path, func(w io.Writer) error {
		return tarball.Write(*tag, img, w)
	})
}

// archiveBlob returns the config or the layer with digest d of the image r
// names, and its size.
func archiveBlob(r Ref, d v1.Hash) (io.ReadCloser, int64, error) {
	img, err := archiveReadImage(r)
	if err != nil {
		return nil, 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, 0, err
	}
	if m.Config.Digest == d {
		raw, err := img.RawConfigFile()
		if err != nil {
			return nil, 0, err
		}
		return io.NopCloser(bytes.NewReader(raw)), int64(len(raw)), nil
	}
	for _, l := range m.Layers {
		if l.Digest != d {
			continue
		}
		layer, err := img.LayerByDigest(d)
		if err != nil {
			return nil, 0, err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return nil, 0, err
		}
		return rc, l.Size, nil
	}
	return nil, 0, fmt.Errorf("%w: blob %s is not in the image", ErrNotFound, d)
}
