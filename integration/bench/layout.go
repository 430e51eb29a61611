package bench

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs/rafstest"
)

// created is the fixed creation time of configs and history entries, so
// the same trees always give the same manifest digests.
var created = time.Date(2025, time.May, 20, 0, 0, 0, 0, time.UTC)

// LayerBlob is a gzip layer already stored in an OCI layout's blob
// directory, with the digests computed while it was written.
type LayerBlob struct {
	path           string
	digest, diffID v1.Hash
	size, tarSize  int64 // compressed, and of the tar
	// CreatedBy is the history entry of images that use the layer.
	CreatedBy string
}

var _ v1.Layer = (*LayerBlob)(nil)

// Digest implements v1.Layer.
func (l *LayerBlob) Digest() (v1.Hash, error) { return l.digest, nil }

// DiffID implements v1.Layer.
func (l *LayerBlob) DiffID() (v1.Hash, error) { return l.diffID, nil }

// Size implements v1.Layer.
func (l *LayerBlob) Size() (int64, error) { return l.size, nil }

// TarSize is the length of the uncompressed tar.
func (l *LayerBlob) TarSize() int64 { return l.tarSize }

// MediaType implements v1.Layer.
func (l *LayerBlob) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

// Compressed implements v1.Layer.
func (l *LayerBlob) Compressed() (io.ReadCloser, error) { return os.Open(l.path) }

// Uncompressed implements v1.Layer.
func (l *LayerBlob) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// WriteTreeLayer packs the directory tree at dir (see WriteTreeTar) into a
// gzip layer at the default level, as docker and containerd write them,
// straight into the blob directory of the OCI layout at layoutDir.
func WriteTreeLayer(ctx context.Context, layoutDir, dir string) (*LayerBlob, error) {
	blobs := filepath.Join(layoutDir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(blobs, ".layer-*.tmp")
	if err != nil {
		return nil, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	comp := &hashWriter{w: f, h: sha256.New()}
	zw, err := gzip.NewWriterLevel(comp, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	raw := &hashWriter{w: zw, h: sha256.New(), stop: ctx.Err}
	if err := WriteTreeTar(raw, dir); err != nil {
		return nil, fmt.Errorf("pack %s: %w", dir, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	l := &LayerBlob{
		digest:  v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", comp.h.Sum(nil))},
		diffID:  v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", raw.h.Sum(nil))},
		size:    comp.n,
		tarSize: raw.n,
	}
	l.path = filepath.Join(blobs, l.digest.Hex)
	if err := os.Rename(f.Name(), l.path); err != nil {
		return nil, err
	}
	return l, nil
}

// ImageConfig is the runtime part of a written image's config.
type ImageConfig struct {
	Env []string
	Cmd []string
}

// AppendImage records an image of the given layers (already in the
// layout's blob directory) under tag in the OCI layout at layoutDir,
// replacing an image with the same tag.
func AppendImage(layoutDir, tag string, cfg ImageConfig, layers []*LayerBlob) error {
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		if p, err = layout.Write(layoutDir, empty.Index); err != nil {
			return err
		}
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: created},
		RootFS:       v1.RootFS{Type: "layers"},
		Config:       v1.Config{Env: cfg.Env, Cmd: cfg.Cmd},
	})
	if err != nil {
		return err
	}
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: l.CreatedBy}}
	}
	if img, err = mutate.Append(img, adds...); err != nil {
		return err
	}
	ann := map[string]string{rafstest.RefNameAnnotation: tag}
	return p.ReplaceImage(img, match.Annotation(rafstest.RefNameAnnotation, tag), layout.WithAnnotations(ann))
}

// hashWriter hashes and counts what passes through it and, if stop is
// set, fails writes once stop returns an error (a context's Err).
type hashWriter struct {
	w    io.Writer
	h    hash.Hash
	n    int64
	stop func() error
}

func (hw *hashWriter) Write(b []byte) (int, error) {
	if hw.stop != nil {
		if err := hw.stop(); err != nil {
			return 0, err
		}
	}
	n, err := hw.w.Write(b)
	hw.h.Write(b[:n])
	hw.n += int64(n)
	return n, err
}

// LayoutImage is the image tagged tag in the OCI layout p.
func LayoutImage(p layout.Path, tag string) (v1.Image, error) {
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Annotations[rafstest.RefNameAnnotation] == tag {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image tagged %s in %s", tag, p)
}

// ImageBytes is what a pull of img moves: its manifest, config and
// layers as stored.
func ImageBytes(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
