package rafstest

import (
	"flag"
	"testing"

	"golang.org/x/sys/unix"
)

var large = flag.Bool("rafstest.large", false, "also test the large corpus image (100 MiB files, 50,000 small files; about 30 s)")

// TestUmociUnpackLarge unpacks the "large" image with umoci and checks it
// against the model, and that CompareTrees copes with its size.
func TestUmociUnpackLarge(t *testing.T) {
	if !*large {
		t.Skip("the large corpus runs only with -rafstest.large")
	}
	requireUmoci(t)
	imgs := Corpus(CorpusOptions{Large: true})
	img := imgs[len(imgs)-1]
	if img.Name != "large" {
		t.Fatalf("last image got %q, want large", img.Name)
	}
	if n := len(img.Layers[0]); n < manyFiles {
		t.Errorf("small-file layer got %d entries, want at least %d", n, manyFiles)
	}
	dir := t.TempDir()
	roots := unpackAll(t, dir, []Image{img}, "")
	checkAgainstModel(t, img, roots["large"])
	for _, c := range []func(string) error{
		size("big/mixed", largeFileSize),
		size("big/zeros", largeZeroSize),
		isType("many/d249/f49999", int(unix.S_IFREG)),
	} {
		if err := c(roots["large"]); err != nil {
			t.Error(err)
		}
	}
	if diffs := CompareTrees(roots["large"], roots["large"]); len(diffs) != 0 {
		t.Errorf("a tree against itself: got %q, want no differences", diffs)
	}
}
