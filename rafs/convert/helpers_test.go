package convert_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// testChunk is the chunk size of these tests: the smallest allowed, so the
// corpus files span several chunks while the layouts stay small.
const testChunk = 64 << 10

// writeCorpus writes the named corpus images (cut for testChunk) into a new
// OCI layout and returns its directory.
func writeCorpus(t *testing.T, names ...string) string {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var imgs []rafstest.Image
	for _, img := range rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: testChunk}) {
		if want[img.Name] {
			imgs = append(imgs, img)
			delete(want, img.Name)
		}
	}
	if len(want) > 0 {
		t.Fatalf("corpus has no images %v", want)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := rafstest.WriteOCILayout(t.Context(), dir, imgs...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// options are the conversion options of these tests.
func options(t *testing.T) convert.Options {
	return convert.Options{Build: rafs.BuildOptions{ChunkSize: testChunk}, WorkDir: t.TempDir()}
}

func mustConvert(t *testing.T, src, dst string, opts convert.Options) *convert.Result {
	t.Helper()
	res, err := convert.Convert(t.Context(), src, dst, opts)
	if err != nil {
		t.Fatalf("convert %s %s: %v", src, dst, err)
	}
	return res
}

func mustOpen(t *testing.T, ref string) *image.Image {
	t.Helper()
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", ref, err)
	}
	t.Cleanup(func() { img.Close() })
	return img
}

// mustCheck runs image.Check and fails t on any problem.
func mustCheck(t *testing.T, img *image.Image) {
	t.Helper()
	res, err := img.Check(t.Context(), 4, nil)
	if err != nil {
		t.Fatalf("check %s: %v", img.Ref, err)
	}
	for _, p := range res.Problems {
		t.Errorf("check %s: blob %s chunk %d: %s", img.Ref, p.Blob, p.Chunk, p.Error)
	}
}

// unpack writes img's tree to a new directory and returns it.
func unpack(t *testing.T, img *image.Image) string {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "rootfs")
	if err := rafs.Unpack(t.Context(), img.Bootstrap(), img.ChunkSource(), dest, rafs.UnpackOptions{}); err != nil {
		t.Fatalf("unpack %s: %v", img.Ref, err)
	}
	return dest
}

// sameTree fails t if the trees at want and got differ.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	if diff := rafstest.CompareTrees(want, got); len(diff) > 0 {
		t.Errorf("trees differ (want=%s, got=%s):\n%s", want, got, strings.Join(diff, "\n"))
	}
}

// chunks returns every chunk of b's chunk table.
func chunks(t *testing.T, b *rafs.Bootstrap) []rafs.Chunk {
	t.Helper()
	out := make([]rafs.Chunk, 0, b.ChunkCount())
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func blobs(t *testing.T, b *rafs.Bootstrap) []rafs.Blob {
	t.Helper()
	bs, err := b.Blobs()
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// requireAbsent fails t if ref names an image, or if dir (a WorkDir) holds
// anything: a failed conversion must leave neither behind.
func requireAbsent(t *testing.T, ref, workDir string) {
	t.Helper()
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.ReadImage(context.Background(), r, transport.Options{}); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("read %s after a failed conversion: got error %v, want one wrapping ErrNotFound", ref, err)
	}
	ents, err := os.ReadDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("work directory holds %s after a failed conversion, want nothing", e.Name())
	}
}
