package convert_test

import (
	"testing"

	"damselfly/rafs/image"
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
