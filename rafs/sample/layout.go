package sample

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RefNameAnnotation is the index annotation that carries an image's tag.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// created is the fixed creation time written into configs and history, so
// that configs and manifests have stable digests too.
var created = time.Date(2021, time.March, 4, 0, 0, 0, 0, time.UTC)

// WriteOCILayout writes imgs into one OCI image layout at dir, creating dir
// if needed and replacing its index.json. Each image is tagged with its Name;
// its layers are gzip-compressed (application/vnd.oci.image.layer.v1.tar+gzip)
// and streamed straight into the layout's blob store, so no layer is ever held
// in memory. Layers that generate identical bytes, such as the base layer
// shared by "base-v1" and "base-v2", are stored once. The output is a pure
// function of imgs.
func WriteOCILayout(ctx context.Context, dir string, imgs ...Image) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("create OCI layout %s: %w", dir, err)
	}
	seen := make(map[string]bool, len(imgs))
	for _, img := range imgs {
		if img.Name == "" || seen[img.Name] {
			return fmt.Errorf("write image %q to %s: name empty or repeated", img.Name, dir)
		}
		seen[img.Name] = true
		if err := appendImage(ctx, p, img); err != nil {
			return fmt.Errorf("write image %q to %s: %w", img.Name, dir, err)
		}
	}
	return nil
}

func appendImage(ctx context.Context, p layout.Path, img Image) error {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: created},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd: []string{"/bin/sh"},
		},
	})
	if err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	adds := make([]mutate.Addendum, len(img.Layers))
	for i, l := range img.Layers {
		fl, err := writeLayerBlob(ctx, p, l)
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		// CreatedBy keeps the name it had when this code lived in rafstest,
		// so that config digests stay what they were.
		adds[i] = mutate.Addendum{
			Layer:     fl,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: fmt.Sprintf("rafstest %s layer %d", img.Name, i)},
		}
	}
	full, err := mutate.Append(base, adds...)
	if err != nil {
		return fmt.Errorf("append layers: %w", err)
	}
	// The layer blobs are already in place with the right size, so this
	// writes only the config, the manifest and the index entry.
	if err := p.AppendImage(full, layout.WithAnnotations(map[string]string{RefNameAnnotation: img.Name})); err != nil {
		return fmt.Errorf("append to index: %w", err)
	}
	return nil
}

// writeLayerBlob streams l through tar and gzip into a temporary file in the
// layout's blob directory, hashing both streams on the way, then renames it
// to its digest.
func writeLayerBlob(ctx context.Context, p layout.Path, l Layer) (_ *fileLayer, err error) {
	blobs := filepath.Join(string(p), "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, fmt.Errorf("create blob directory: %w", err)
	}
	f, err := os.CreateTemp(blobs, ".layer-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create temporary blob: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	compressed := &hashWriter{w: f, h: sha256.New()}
	zw, err := gzip.NewWriterLevel(compressed, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	uncompressed := &hashWriter{w: zw, h: sha256.New(), stop: ctx.Err}
	if err := WriteLayerTar(uncompressed, l); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("finish gzip: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return nil, fmt.Errorf("chmod temporary blob: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close temporary blob: %w", err)
	}
	fl := &fileLayer{
		digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", compressed.h.Sum(nil))},
		diffID: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", uncompressed.h.Sum(nil))},
		size:   compressed.n,
	}
	fl.path = filepath.Join(blobs, fl.digest.Hex)
	if err := os.Rename(f.Name(), fl.path); err != nil {
		return nil, fmt.Errorf("store blob %s: %w", fl.digest, err)
	}
	return fl, nil
}

// hashWriter hashes and counts what passes through it and, if stop is set,
// fails writes once stop returns an error (a context's Err).
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

// fileLayer is a gzip layer blob already stored in a layout, with digests
// computed while it was written.
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open gzip layer %s: %w", l.digest, err)
	}
	return gzipFile{Reader: zr, f: f}, nil
}

// gzipFile closes both the gzip reader and the file under it.
type gzipFile struct {
	*gzip.Reader
	f *os.File
}

func (g gzipFile) Close() error {
	return errors.Join(g.Reader.Close(), g.f.Close())
}
