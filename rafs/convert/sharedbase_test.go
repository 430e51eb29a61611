package convert_test

import (
	"archive/tar"
	"bytes"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// TestSharedBaseStoredOnce: two images sharing a base layer, converted
// independently (no dictionary), get the same blob for it, so a registry
// and a node cache hold the base once.
func TestSharedBaseStoredOnce(t *testing.T) {
	dir := writeCorpus(t, "base-v1", "base-v2")
	var blobs [2][]string
	for i, name := range []string{"base-v1", "base-v2"} {
		mustConvert(t, "oci:"+dir+":"+name, "oci:"+dir+":"+name+"-rafs", options(t))
		img, err := image.Open(t.Context(), "oci:"+dir+":"+name+"-rafs", image.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := img.Bootstrap().Blobs()
		img.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			blobs[i] = append(blobs[i], b.Digest.String())
		}
	}
	if len(blobs[0]) < 2 || len(blobs[1]) < 2 {
		t.Fatalf("blobs: got %v and %v, want a base blob and an upper blob each", blobs[0], blobs[1])
	}
	if blobs[0][0] != blobs[1][0] {
		t.Errorf("base blob: got %s and %s, want the same blob", blobs[0][0], blobs[1][0])
	}
	if blobs[0][1] == blobs[1][1] {
		t.Errorf("upper blobs are identical (%s) although the upper layers differ", blobs[0][1])
	}
}

// TestChunkDictWithRawChunks: a dictionary blob that starts with a zstd
// frame and holds raw (incompressible) chunks after it must be copied as
// an opaque blob, not sniffed and decoded as one zstd stream.
func TestChunkDictWithRawChunks(t *testing.T) {
	mk := func(name string, extra []byte) rafstest.Image {
		entry := func(n string, data []byte) rafstest.Entry {
			return rafstest.Entry{
				Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1, 0), Format: tar.FormatPAX},
				Data: func(w io.Writer) error { _, err := w.Write(data); return err },
			}
		}
		noise := make([]byte, 3*testChunk)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range noise {
			noise[i] = byte(r.Uint32())
		}
		base := rafstest.Layer{entry("text", bytes.Repeat([]byte("compressible "), 10000)), entry("noise", noise)}
		return rafstest.Image{Name: name, Layers: []rafstest.Layer{base, {entry("extra", extra)}}}
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := rafstest.WriteOCILayout(t.Context(), dir, mk("v1", []byte("one")), mk("v2", []byte("two"))); err != nil {
		t.Fatal(err)
	}
	mustConvert(t, "oci:"+dir+":v1", "oci:"+dir+":v1-rafs", options(t))
	opts := options(t)
	opts.ChunkDict = "oci:" + dir + ":v1-rafs"
	res := mustConvert(t, "oci:"+dir+":v2", "oci:"+dir+":v2-rafs", opts)
	if res.Stats.DictChunks == 0 {
		t.Fatalf("no chunk came from the dictionary: %+v", res.Stats)
	}
	img, err := image.Open(t.Context(), "oci:"+dir+":v2-rafs", image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	cr, err := img.Check(t.Context(), 2, nil)
	if err != nil || len(cr.Problems) > 0 {
		t.Fatalf("check: %v %+v", err, cr)
	}
}
