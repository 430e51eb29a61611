package image_test

import (
	"archive/tar"
	"errors"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// TestIndex: convert --index tags an index of the plain manifest and the
// RAFS one; runtimes resolving it by platform get the plain image, and
// image.Open gets the RAFS one.
func TestIndex(t *testing.T) {
	t.Parallel()
	layout, res := convertCorpus(t, "symlinks", convert.Options{Index: true})
	ref := "oci:" + layout + ":symlinks-rafs"
	if res.IndexDigest == "" {
		t.Fatal("got no index digest, want one")
	}

	idx, ok, err := transport.ReadIndex(t.Context(), mustParse(t, ref), transport.Options{})
	if err != nil || !ok {
		t.Fatalf("read index %s: got %v, %v, want an index", ref, ok, err)
	}
	if d, err := idx.Digest(); err != nil || d.String() != res.IndexDigest {
		t.Errorf("index digest: got %v, %v, want %s", d, err, res.IndexDigest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type: got %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index lists %d manifests, want 2", len(im.Manifests))
	}
	for i, want := range []struct {
		digest   string
		features []string
	}{
		{res.SourceDigest, nil},
		{res.Digest, []string{rafs.PlatformFeature}},
	} {
		d := im.Manifests[i]
		if d.Digest.String() != want.digest {
			t.Errorf("manifest %d: got %s, want %s", i, d.Digest, want.digest)
		}
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d media type: got %s, want %s", i, d.MediaType, types.OCIManifestSchema1)
		}
		if d.Platform == nil {
			t.Errorf("manifest %d: got no platform, want linux/amd64", i)
			continue
		}
		if d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" || !slices.Equal(d.Platform.Features, want.features) {
			t.Errorf("manifest %d platform: got %s features %q, want linux/amd64 features %q", i, d.Platform, d.Platform.Features, want.features)
		}
	}

	amd64 := &v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 := &v1.Platform{OS: "linux", Architecture: "arm64"}
	t.Run("plain runtime", func(t *testing.T) {
		img, err := transport.ReadImage(t.Context(), mustParse(t, ref), transport.Options{Platform: amd64})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := img.Digest(); err != nil || d.String() != res.SourceDigest {
			t.Errorf("plain resolution: got %v, %v, want the source %s", d, err, res.SourceDigest)
		}
	})

	// The corpus images are linux/amd64: elsewhere the default finds none.
	var defaultErr error
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		defaultErr = transport.ErrNoPlatform
	}
	for _, tc := range []struct {
		name     string
		platform *v1.Platform
		wantErr  error // nil: opens the RAFS manifest
	}{
		{"default platform", nil, defaultErr},
		{"linux/amd64", amd64, nil},
		{"with the feature asked for", &v1.Platform{OS: "linux", Architecture: "amd64", Features: []string{rafs.PlatformFeature}}, nil},
		{"linux/arm64", arm64, transport.ErrNoPlatform},
	} {
		t.Run("open "+tc.name, func(t *testing.T) {
			img, err := image.Open(t.Context(), ref, image.Options{Transport: transport.Options{Platform: tc.platform}})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("got error %v, want one wrapping %v", err, tc.wantErr)
				}
				if err == nil {
					img.Close()
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			if img.Digest.String() != res.Digest {
				t.Errorf("opened %s, want the RAFS manifest %s", img.Digest, res.Digest)
			}
			if _, err := img.Bootstrap().LookupPath("/"); err != nil {
				t.Errorf("lookup /: %v", err)
			}
		})
	}

	t.Run("index without a RAFS manifest", func(t *testing.T) {
		// The plain image alone, tagged as an index: Open resolves it as
		// usual and refuses the plain image.
		src, err := transport.ReadImage(t.Context(), mustParse(t, "oci:"+layout+":symlinks"), transport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plain := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
			mutate.IndexAddendum{Add: src, Descriptor: v1.Descriptor{Platform: amd64}})
		pref := "oci:" + layout + ":plain-index"
		if err := transport.WriteIndex(t.Context(), mustParse(t, pref), plain, transport.Options{}); err != nil {
			t.Fatal(err)
		}
		img, err := image.Open(t.Context(), pref, image.Options{Transport: transport.Options{Platform: amd64}})
		if !errors.Is(err, image.ErrNotRAFS) {
			t.Errorf("got error %v, want one wrapping ErrNotRAFS", err)
		}
		if err == nil {
			img.Close()
		}
	})
}

// TestOpenTiny opens images whose bootstraps are smaller than zstd's
// minimum window of 1 KiB.
func TestOpenTiny(t *testing.T) {
	t.Parallel()
	hello := rafstest.Entry{
		Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: "hello", Mode: 0o644, Size: 6},
		Data: func(w io.Writer) error { _, err := io.WriteString(w, "hello\n"); return err },
	}
	for _, tc := range []struct {
		name  string
		layer rafstest.Layer
		files int
	}{
		{"empty layer", rafstest.Layer{}, 0},
		{"one file", rafstest.Layer{hello}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layout := filepath.Join(t.TempDir(), "oci")
			if err := rafstest.WriteOCILayout(t.Context(), layout, rafstest.Image{Name: "tiny", Layers: []rafstest.Layer{tc.layer}}); err != nil {
				t.Fatal(err)
			}
			dst := "oci:" + layout + ":tiny-rafs"
			if _, err := convert.Convert(t.Context(), "oci:"+layout+":tiny", dst, convert.Options{WorkDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			img := mustOpen(t, dst, image.Options{})
			if n := img.Bootstrap().Size(); n > 1024 {
				t.Errorf("bootstrap has %d bytes, want at most 1024 for this test", n)
			}
			s, err := rafs.Summarize(img.Bootstrap())
			if err != nil {
				t.Fatal(err)
			}
			if s.Files != tc.files {
				t.Errorf("files: got %d, want %d", s.Files, tc.files)
			}
		})
	}
}
