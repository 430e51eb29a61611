package transport

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// layoutManifests returns the descriptors in the layout's index.json.
func layoutManifests(t *testing.T, dir string) []v1.Descriptor {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	im, err := v1.ParseIndexManifest(f)
	if err != nil {
		t.Fatal(err)
	}
	return im.Manifests
}

func TestOCIRoundTrip(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "layout") // does not exist yet
	img := randomImage(t)
	r := mustParse(t, "oci:"+dir+":v1")
	if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadImage(t.Context(), r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := digest(t, got), digest(t, img); g != w {
		t.Errorf("got digest %s, want %s", g, w)
	}
	// The only manifest is taken when no tag is given.
	got, err = ReadImage(t.Context(), mustParse(t, "oci:"+dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := digest(t, got), digest(t, img); g != w {
		t.Errorf("untagged: got digest %s, want %s", g, w)
	}
	if _, isIndex, err := ReadIndex(t.Context(), r, Options{}); err != nil || isIndex {
		t.Errorf("ReadIndex of an image: got isIndex %v, err %v; want false, nil", isIndex, err)
	}
}

func TestOCIRewriteDoesNotDuplicate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := randomImage(t), randomImage(t)
	steps := []struct {
		ref  string
		img  v1.Image
		want int // manifests in index.json afterwards
	}{
		{"oci:" + dir + ":v1", first, 1},
		{"oci:" + dir + ":v1", first, 1},  // same tag, same image
		{"oci:" + dir + ":v1", second, 1}, // same tag, new image replaces
		{"oci:" + dir + ":v2", first, 2},  // new tag adds
		{"oci:" + dir, first, 3},          // untagged adds
		{"oci:" + dir, first, 3},          // untagged, same digest: no duplicate
	}
	for i, s := range steps {
		if err := WriteImage(t.Context(), mustParse(t, s.ref), s.img, Options{}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := len(layoutManifests(t, dir)); got != s.want {
			t.Fatalf("step %d (%s): got %d manifests, want %d", i, s.ref, got, s.want)
		}
	}
	got, err := ReadImage(t.Context(), mustParse(t, "oci:"+dir+":v1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := digest(t, got), digest(t, second); g != w {
		t.Errorf("v1 after replacement: got %s, want %s", g, w)
	}
	// The layout must still be readable by go-containerregistry itself.
	if _, err := layout.ImageIndexFromPath(dir); err != nil {
		t.Errorf("layout unreadable after rewrites: %v", err)
	}
}

func TestOCISelectErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tag := range []string{"v2", "v1"} {
		if err := WriteImage(t.Context(), mustParse(t, "oci:"+dir+":"+tag), randomImage(t), Options{}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		ref      string
		notFound bool
		contains []string
	}{
		{"several without tag", "oci:" + dir, false, []string{"read image oci:" + dir, "2 manifests", "v1, v2"}},
		{"unknown tag", "oci:" + dir + ":nope", true, []string{`tag "nope"`, "v1, v2"}},
		{"no layout", "oci:" + filepath.Join(dir, "missing"), true, []string{"no OCI layout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadImage(t.Context(), mustParse(t, tt.ref), Options{})
			if err == nil {
				t.Fatal("got no error")
			}
			if got := errors.Is(err, ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(%v, ErrNotFound) = %v, want %v", err, got, tt.notFound)
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("got error %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestOCIIndex(t *testing.T) {
	t.Parallel()
	idx, imgs := platformIndex(t, linuxAMD64, linuxARM64)

	t.Run("tagged", func(t *testing.T) {
		t.Parallel()
		r := mustParse(t, "oci:"+t.TempDir()+":multi")
		for range 2 {
			if err := WriteIndex(t.Context(), r, idx, Options{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(layoutManifests(t, r.Path)); got != 1 {
			t.Errorf("got %d manifests after writing the index twice, want 1", got)
		}
		got, isIndex, err := ReadIndex(t.Context(), r, Options{})
		if err != nil || !isIndex {
			t.Fatalf("ReadIndex: got isIndex %v, err %v; want true, nil", isIndex, err)
		}
		if g, w := digest(t, got), digest(t, idx); g != w {
			t.Errorf("got index %s, want %s", g, w)
		}
		checkPlatforms(t, r, imgs)
	})

	t.Run("index.json is the index", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := layout.Write(dir, idx); err != nil {
			t.Fatal(err)
		}
		r := mustParse(t, "oci:"+dir)
		if _, isIndex, err := ReadIndex(t.Context(), r, Options{}); err != nil || !isIndex {
			t.Fatalf("ReadIndex: got isIndex %v, err %v; want true, nil", isIndex, err)
		}
		checkPlatforms(t, r, imgs)
	})
}
