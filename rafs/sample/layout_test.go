package sample_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs/rafstest"
	. "damselfly/rafs/sample"
)

// TestWriteOCILayoutValid reads the layout back with go-containerregistry and
// checks every image: tags, platform, media types, and each layer's digest,
// size and diff ID recomputed from the stored blob.
func TestWriteOCILayoutValid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	imgs := rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: 64 << 10})
	if err := WriteOCILayout(t.Context(), dir, imgs...); err != nil {
		t.Fatalf("WriteOCILayout: %v", err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(imgs) {
		t.Fatalf("got %d manifests, want %d", len(im.Manifests), len(imgs))
	}
	for i, desc := range im.Manifests {
		name := imgs[i].Name
		if got := desc.Annotations[RefNameAnnotation]; got != name {
			t.Errorf("manifest %d: tag got %q, want %q", i, got, name)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cf.OS != "linux" || cf.Architecture != "amd64" || len(cf.RootFS.DiffIDs) != len(imgs[i].Layers) {
			t.Errorf("%s: config got %s/%s with %d diff IDs, want linux/amd64 with %d", name, cf.OS, cf.Architecture, len(cf.RootFS.DiffIDs), len(imgs[i].Layers))
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for j, l := range layers {
			if mt, _ := l.MediaType(); mt != types.OCILayer {
				t.Errorf("%s layer %d: media type got %s, want %s", name, j, mt, types.OCILayer)
			}
			if err := checkLayer(l, cf.RootFS.DiffIDs[j]); err != nil {
				t.Errorf("%s layer %d: %v", name, j, err)
			}
		}
	}
}

func TestWriteOCILayoutErrors(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	one := Image{Name: "one", Layers: []Layer{{{
		Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, Size: 1, Format: tar.FormatPAX},
		Data: func(w io.Writer) error { _, err := w.Write([]byte("x")); return err },
	}}}}
	tests := []struct {
		name string
		ctx  context.Context
		imgs []Image
		is   error // if set, the error must wrap it
		msg  string
	}{
		{"cancelled", cancelled, []Image{one}, context.Canceled, ""},
		{"repeated name", t.Context(), []Image{one, one}, nil, "name empty or repeated"},
		{"empty name", t.Context(), []Image{{Layers: one.Layers}}, nil, "name empty or repeated"},
		{"short data", t.Context(), []Image{{Name: "short", Layers: []Layer{{{Hdr: one.Layers[0][0].Hdr, Data: func(io.Writer) error { return nil }}}}}}, ErrShortData, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			err := WriteOCILayout(tt.ctx, dir, tt.imgs...)
			switch {
			case err == nil:
				t.Fatal("got no error")
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("got %v, want it to wrap %v", err, tt.is)
			case !strings.Contains(err.Error(), tt.msg):
				t.Errorf("got %v, want it to mention %q", err, tt.msg)
			}
			tmp, _ := filepath.Glob(filepath.Join(dir, "blobs", "sha256", ".layer-*"))
			if len(tmp) != 0 {
				t.Errorf("temporary blobs left behind: %v", tmp)
			}
		})
	}
}

// checkLayer recomputes a layer's digest and size from its compressed blob
// and its diff ID from the decompressed stream.
func checkLayer(l v1.Layer, diffID v1.Hash) error {
	digest, err := l.Digest()
	if err != nil {
		return err
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	if got, err := l.DiffID(); err != nil || got != diffID {
		return fmt.Errorf("diff ID got %s (%v), config has %s", got, err, diffID)
	}
	for _, c := range []struct {
		what string
		open func() (io.ReadCloser, error)
		hash v1.Hash
		size int64 // -1: not checked
	}{
		{"compressed", l.Compressed, digest, size},
		{"uncompressed", l.Uncompressed, diffID, -1},
	} {
		rc, err := c.open()
		if err != nil {
			return fmt.Errorf("open %s: %w", c.what, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", c.what, err)
		}
		if got := fmt.Sprintf("sha256:%x", h.Sum(nil)); got != c.hash.String() {
			return fmt.Errorf("%s digest got %s, want %s", c.what, got, c.hash)
		}
		if c.size >= 0 && n != c.size {
			return fmt.Errorf("%s size got %d, want %d", c.what, n, c.size)
		}
	}
	return nil
}
