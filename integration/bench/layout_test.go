package bench

import (
	"crypto/sha256"
	"fmt"
	"io"
	"testing"

	"damselfly/rafs/transport"
)

// TestAppendImage writes a tree layer twice into a layout (same blob),
// tags two images with it and reads them back with verified digests.
func TestAppendImage(t *testing.T) {
	ctx := t.Context()
	tree := makeTree(t)
	dir := t.TempDir()
	a, err := WriteTreeLayer(ctx, dir, tree)
	if err != nil {
		t.Fatal(err)
	}
	b, err := WriteTreeLayer(ctx, dir, tree)
	if err != nil {
		t.Fatal(err)
	}
	if a.digest != b.digest || a.diffID != b.diffID {
		t.Fatalf("got layers %s and %s from one tree, want one", a.digest, b.digest)
	}
	for _, tag := range []string{"one", "two", "one"} {
		if err := AppendImage(dir, tag, debianConfig, []*LayerBlob{a, b}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tag := range []string{"one", "two"} {
		ref, err := transport.Parse("oci:"+dir+":"+tag, transport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		img, err := transport.ReadImage(ctx, ref, transport.Options{})
		if err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 2 {
			t.Fatalf("%s: got %d layers (%v), want 2", tag, len(ls), err)
		}
		rc, err := ls[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("sha256:%x", h.Sum(nil)); got != a.diffID.String() || n != a.TarSize() {
			t.Errorf("%s: got tar %s of %d bytes, want %s of %d", tag, got, n, a.diffID, a.TarSize())
		}
	}
}
