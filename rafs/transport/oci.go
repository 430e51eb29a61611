package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
)

// refNameAnnotation is the OCI annotation an oci: tag is matched against.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// ociSelect opens the layout at r.Path and returns the descriptor in its
// index.json that r names: the one whose ref.name is r.Tag or, without a
// tag, the only one. It returns a nil descriptor when r has no tag and the
// layout holds several manifests none of which is tagged: index.json is
// then itself the multi-platform index (as written by `crane pull
// --format=oci`). When a tag occurs more than once the last entry wins, as
// it is the newest.
func ociSelect(r Ref) (v1.ImageIndex, *v1.Descriptor, error) {
	ii, err := layout.ImageIndexFromPath(r.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: no OCI layout at %s: %w", ErrNotFound, r.Path, err)
		}
		return nil, nil, err
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("read index.json: %w", err)
	}
	tags := ociTags(im)
	if r.Tag != "" {
		for i := len(im.Manifests) - 1; i >= 0; i-- {
			if im.Manifests[i].Annotations[refNameAnnotation] == r.Tag {
				return ii, &im.Manifests[i], nil
			}
		}
		return nil, nil, fmt.Errorf("%w: tag %q not in layout (tags: %s)", ErrNotFound, r.Tag, listOrNone(tags))
	}
	switch {
	case len(im.Manifests) == 0:
		return nil, nil, fmt.Errorf("%w: layout has no manifests", ErrNotFound)
	case len(im.Manifests) == 1:
		return ii, &im.Manifests[0], nil
	case len(tags) > 0:
		return nil, nil, fmt.Errorf("layout has %d manifests; name one as oci:%s:TAG (tags: %s)",
			len(im.Manifests), r.Path, listOrNone(tags))
	default:
		return ii, nil, nil
	}
}

// ociTags lists the distinct ref.name annotations in im, sorted.
func ociTags(im *v1.IndexManifest) []string {
	var tags []string
	for _, d := range im.Manifests {
		if t := d.Annotations[refNameAnnotation]; t != "" {
			tags = append(tags, t)
		}
	}
	slices.Sort(tags)
	return slices.Compact(tags)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// ociReadImage returns the image r names, resolving an index to want.
func ociReadImage(r Ref, want v1.Platform) (v1.Image, error) {
	ii, d, err := ociSelect(r)
	switch {
	case err != nil:
		return nil, err
	case d == nil:
		return imageForPlatform(ii, want)
	case d.MediaType.IsImage():
		return ii.Image(d.Digest)
	case d.MediaType.IsIndex():
		child, err := ii.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		return imageForPlatform(child, want)
	default:
		return nil, fmt.Errorf("manifest %s has unsupported media type %q", d.Digest, d.MediaType)
	}
}

// ociReadIndex returns the index r names, or false when it names an image.
func ociReadIndex(r Ref) (v1.ImageIndex, bool, error) {
	ii, d, err := ociSelect(r)
	switch {
	case err != nil:
		return nil, false, err
	case d == nil:
		return ii, true, nil
	case d.MediaType.IsIndex():
		child, err := ii.ImageIndex(d.Digest)
		if err != nil {
			return nil, false, err
		}
		return child, true, nil
	default:
		return nil, false, nil
	}
}

// ociOpen returns the layout at dir, creating an empty one if there is none.
func ociOpen(dir string) (layout.Path, error) {
	p, err := layout.FromPath(dir)
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return layout.Write(dir, empty.Index)
}

// ociAdd records the manifest of obj, whose blobs are already in the
// layout, in index.json under tag. It replaces entries with the same tag
// or, when untagged, untagged entries with the same digest, so writing the
// same thing twice leaves the layout unchanged. index.json is replaced
// atomically; concurrent writers to one layout must be serialised by the
// caller.
func ociAdd(dir string, obj partial.Describable, tag string) error {
	desc, err := partial.Descriptor(obj)
	if err != nil {
		return fmt.Errorf("describe manifest: %w", err)
	}
	indexPath := filepath.Join(dir, "index.json")
	raw, err := os.ReadFile(indexPath)
	if err != nil {
		return err
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("parse %s: %w", indexPath, err)
	}
	im.Manifests = slices.DeleteFunc(im.Manifests, func(d v1.Descriptor) bool {
		name := d.Annotations[refNameAnnotation]
		if tag != "" {
			return name == tag
		}
		return name == "" && d.Digest == desc.Digest
	})
	entry := v1.Descriptor{MediaType: desc.MediaType, Size: desc.Size, Digest: desc.Digest, Platform: desc.Platform}
	if tag != "" {
		entry.Annotations = map[string]string{refNameAnnotation: tag}
	}
	im.Manifests = append(im.Manifests, entry)
	return writeJSONAtomic(indexPath, im)
}

// LocalFile is implemented by a layer whose compressed form is a whole,
// finished local file, such as a blob the converter has just built.
// Writing an image to an oci: layout hard-links such a file into the
// layout rather than copying it, when both are on one file system.
type LocalFile interface {
	LocalFile() string
}

// linkFile is os.Link; tests replace it to see the copy taken instead.
var linkFile = os.Link

// ociLinkBlobs hard-links into the layout at dir the layers of img that are
// local files of the size they claim and that the layout does not hold yet,
// so that writing img finds them in place. A layer it cannot link (another
// file system, a file of another size) is left to the layout's copy: this
// only spares the copy of a multi-gigabyte image's blobs.
func ociLinkBlobs(dir string, img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		lf, ok := l.(LocalFile)
		if !ok {
			continue
		}
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		src := lf.LocalFile()
		fi, err := os.Stat(src)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
			continue
		}
		blobs := filepath.Join(dir, "blobs", d.Algorithm)
		dst := filepath.Join(blobs, d.Hex)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.MkdirAll(blobs, 0o755); err != nil {
			return err
		}
		// A converter's work files may be private to it; blobs in a
		// layout are for everyone to read.
		if fi.Mode().Perm() != 0o644 {
			if err := os.Chmod(src, 0o644); err != nil {
				continue
			}
		}
		if err := linkFile(src, dst); err != nil && !errors.Is(err, fs.ErrExist) {
			continue
		}
	}
	return nil
}
