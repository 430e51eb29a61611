package bench

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"

	"damselfly/rafs/transport"
)

func TestConvertEStargz(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	src, err := CorpusPairLayout(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "estargz")
	res, err := ConvertEStargz(ctx, "oci:"+src+":base-v1", dst)
	if err != nil {
		t.Fatal(err)
	}
	if res.Layers != 2 || res.OutputBytes <= 0 || res.SourceBytes <= 0 {
		t.Fatalf("got %+v, want 2 layers in and out", res)
	}
	ref, err := transport.Parse(res.Destination, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := transport.ReadImage(ctx, ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, l := range m.Layers {
		total += l.Size
		if l.Annotations[estargz.TOCJSONDigestAnnotation] == "" {
			t.Errorf("layer %d: no TOC digest annotation", i)
		}
		f, err := os.Open(filepath.Join(dst, "blobs", "sha256", l.Digest.Hex))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r, err := estargz.Open(io.NewSectionReader(f, 0, l.Size))
		if err != nil {
			t.Fatalf("layer %d is not eStargz: %v", i, err)
		}
		if i == 0 {
			if _, ok := r.Lookup("etc/os-release"); !ok {
				t.Errorf("layer 0: etc/os-release not in the TOC")
			}
		}
	}
	if total != res.OutputBytes {
		t.Errorf("got %d bytes of layers in the manifest, result says %d", total, res.OutputBytes)
	}
}
