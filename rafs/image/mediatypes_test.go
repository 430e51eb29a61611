package image_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// The converter writes the current media types; an image written with
// the legacy ones (as older converters did, still in registries) opens,
// checks clean and reads the same bytes.
func TestOpenLegacyMediaTypes(t *testing.T) {
	t.Parallel()
	dir, _ := convertCorpus(t, "base-v1", convert.Options{})
	ref := "oci:" + dir + ":base-v1-rafs"
	src, err := transport.ReadImage(t.Context(), mustParse(t, ref), transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := src.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		want := rafs.MediaTypeBlob
		if i == len(m.Layers)-1 {
			want = rafs.MediaTypeBootstrap
		}
		if string(l.MediaType) != want {
			t.Errorf("converted layer %d: media type %s, want %s", i, l.MediaType, want)
		}
	}
	legacy, err := rafstest.LegacyMediaTypes(src)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(legacy, layout.WithAnnotations(map[string]string{rafstest.RefNameAnnotation: "legacy"})); err != nil {
		t.Fatal(err)
	}

	cur := mustOpen(t, ref, image.Options{})
	old := mustOpen(t, "oci:"+dir+":legacy", image.Options{})
	for i, l := range old.Manifest.Layers {
		want := rafs.LegacyMediaTypeBlob
		if i == len(old.Manifest.Layers)-1 {
			want = rafs.LegacyMediaTypeBootstrap
		}
		if string(l.MediaType) != want {
			t.Fatalf("legacy layer %d: media type %s, want %s", i, l.MediaType, want)
		}
	}
	if res := check(t, old); len(res.Problems) != 0 {
		t.Errorf("legacy image: %d problems, first %+v", len(res.Problems), res.Problems[0])
	}
	want := readAll(t, cur)
	got := readAll(t, old)
	if len(got) == 0 || len(got) != len(want) {
		t.Fatalf("legacy image has %d files, current %d", len(got), len(want))
	}
	for name, data := range want {
		if got[name] != data {
			t.Errorf("%s differs between the legacy and the current image", name)
		}
	}
}

// readAll returns every regular file of img's tree by path.
func readAll(t *testing.T, img *image.Image) map[string]string {
	t.Helper()
	fsys := img.FS(t.Context())
	out := map[string]string{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A manifest whose last layer is no RAFS bootstrap is not RAFS, and one
// whose blob layers are not RAFS blobs is refused, whichever
// generation of media types the rest uses.
func TestBootstrapLayerMediaTypes(t *testing.T) {
	t.Parallel()
	ver := map[string]string{rafs.AnnotationVersion: "1"}
	for _, tc := range []struct {
		name   string
		m      v1.Manifest
		wantOK bool
	}{
		{"current", v1.Manifest{Annotations: ver, Layers: []v1.Descriptor{{MediaType: rafs.MediaTypeBlob}, {MediaType: rafs.MediaTypeBootstrap}}}, true},
		{"legacy", v1.Manifest{Annotations: ver, Layers: []v1.Descriptor{{MediaType: rafs.LegacyMediaTypeBlob}, {MediaType: rafs.LegacyMediaTypeBootstrap}}}, true},
		{"tar last", v1.Manifest{Annotations: ver, Layers: []v1.Descriptor{{MediaType: rafs.MediaTypeBlob}, {MediaType: types.OCILayer}}}, false},
		{"blob last", v1.Manifest{Annotations: ver, Layers: []v1.Descriptor{{MediaType: rafs.MediaTypeBlob}}}, false},
		{"no annotation", v1.Manifest{Layers: []v1.Descriptor{{MediaType: rafs.MediaTypeBootstrap}}}, false},
		{"no layers", v1.Manifest{Annotations: ver}, false},
	} {
		_, err := image.BootstrapLayer(&tc.m)
		if tc.wantOK && err != nil {
			t.Errorf("%s: got %v, want the bootstrap", tc.name, err)
		}
		if !tc.wantOK && !errors.Is(err, image.ErrNotRAFS) {
			t.Errorf("%s: got %v, want ErrNotRAFS", tc.name, err)
		}
	}
}

// A RAFS manifest whose blob layer has a tar media type is refused
// naming the layer, before any chunk is read through it.
func TestOpenRefusesNonBlobLayer(t *testing.T) {
	t.Parallel()
	dir, _ := convertCorpus(t, "base-v1", convert.Options{})
	src, err := transport.ReadImage(t.Context(), mustParse(t, "oci:"+dir+":base-v1-rafs"), transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := rafstest.RetypeLayers(src, func(i int, mt types.MediaType) (types.MediaType, error) {
		if i == 0 {
			return types.OCILayer, nil
		}
		return mt, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(bad, layout.WithAnnotations(map[string]string{rafstest.RefNameAnnotation: "tar-blob"})); err != nil {
		t.Fatal(err)
	}
	img, err := image.Open(t.Context(), "oci:"+filepath.Clean(dir)+":tar-blob", image.Options{})
	if err == nil {
		img.Close()
		t.Fatal("opened a RAFS image whose first blob layer is a tar layer")
	}
	if !strings.Contains(err.Error(), "not a RAFS blob") {
		t.Errorf("got %v, want it to say the layer is not a RAFS blob", err)
	}
}
