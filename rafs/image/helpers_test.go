package image_test

import (
	"path/filepath"
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

// convertCorpus writes the corpus image name into a new OCI layout,
// converts it to oci:LAYOUT:NAME-rafs with opts (chunk size and work
// directory filled in), and returns the layout and the result.
func convertCorpus(t *testing.T, name string, opts convert.Options) (string, *convert.Result) {
	t.Helper()
	var img rafstest.Image
	for _, i := range rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: testChunk}) {
		if i.Name == name {
			img = i
		}
	}
	if img.Name == "" {
		t.Fatalf("corpus has no image %q", name)
	}
	layout := filepath.Join(t.TempDir(), "oci")
	if err := rafstest.WriteOCILayout(t.Context(), layout, img); err != nil {
		t.Fatal(err)
	}
	opts.Build.ChunkSize = testChunk
	opts.WorkDir = t.TempDir()
	res, err := convert.Convert(t.Context(), "oci:"+layout+":"+name, "oci:"+layout+":"+name+"-rafs", opts)
	if err != nil {
		t.Fatal(err)
	}
	return layout, res
}

func mustOpen(t *testing.T, ref string, opts image.Options) *image.Image {
	t.Helper()
	img, err := image.Open(t.Context(), ref, opts)
	if err != nil {
		t.Fatalf("open %s: %v", ref, err)
	}
	t.Cleanup(func() { img.Close() })
	return img
}

func mustParse(t *testing.T, ref string) transport.Ref {
	t.Helper()
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// blobPath is the file of a RAFS blob in an OCI layout.
func blobPath(layout string, b rafs.Blob) string {
	return rafs.BlobPath(filepath.Join(layout, "blobs", "sha256"), b.Digest)
}
