package convert_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/transport"
)

// TestChunkDict converts base-v2 with base-v1's RAFS image as chunk
// dictionary, into another layout so that the reused blobs must be copied.
func TestChunkDict(t *testing.T) {
	t.Parallel()
	src := writeCorpus(t, "base-v1", "base-v2")
	dictLayout := filepath.Join(t.TempDir(), "dict")
	out := filepath.Join(t.TempDir(), "out")
	dictRef := "oci:" + dictLayout + ":base-v1-rafs"
	mustConvert(t, "oci:"+src+":base-v1", dictRef, options(t))
	opts := options(t)
	opts.ChunkDict = dictRef
	res := mustConvert(t, "oci:"+src+":base-v2", "oci:"+out+":base-v2-dict", opts)
	mustConvert(t, "oci:"+src+":base-v2", "oci:"+out+":base-v2-plain", options(t))

	v1 := mustOpen(t, dictRef)
	v2 := mustOpen(t, "oci:"+out+":base-v2-dict")
	plain := mustOpen(t, "oci:"+out+":base-v2-plain")

	inV1 := map[rafs.Digest]bool{}
	for _, c := range chunks(t, v1.Bootstrap()) {
		inV1[c.Digest] = true
	}
	v1Blobs := map[rafs.Digest]bool{}
	for _, b := range blobs(t, v1.Bootstrap()) {
		v1Blobs[b.Digest] = true
	}
	v2Blobs := blobs(t, v2.Bootstrap())

	// Chunks in v2's new blobs, and v2 chunks that v1 lacks.
	newChunks, notInV1, fromDict := 0, 0, 0
	usedV1Blobs := map[rafs.Digest]bool{}
	for _, c := range chunks(t, v2.Bootstrap()) {
		if !inV1[c.Digest] {
			notInV1++
		}
		b := v2Blobs[c.Blob].Digest
		if v1Blobs[b] {
			fromDict++
			usedV1Blobs[b] = true
			continue
		}
		newChunks++
		if inV1[c.Digest] {
			t.Errorf("chunk %d (%s) is stored in new blob %s, but the dictionary holds it", c.Index, c.Digest, b)
		}
	}
	if newChunks != notInV1 {
		t.Errorf("chunks in new blobs: got %d, want %d (v2 chunks not in v1)", newChunks, notInV1)
	}
	if newChunks == 0 || fromDict == 0 {
		t.Fatalf("got %d new and %d dictionary chunks, want some of each: the test proves nothing", newChunks, fromDict)
	}
	if res.Stats.NewChunks != newChunks || res.Stats.DictChunks != fromDict {
		t.Errorf("stats: got %d new and %d dictionary chunks, want %d and %d", res.Stats.NewChunks, res.Stats.DictChunks, newChunks, fromDict)
	}
	if res.DictBlobs != len(usedV1Blobs) {
		t.Errorf("result dict_blobs: got %d, want %d", res.DictBlobs, len(usedV1Blobs))
	}
	var inBlobs uint32
	for _, b := range v2Blobs {
		if !v1Blobs[b.Digest] {
			inBlobs += b.ChunkCount
		}
	}
	if int(inBlobs) != newChunks {
		t.Errorf("chunk counts of the new blob records: got %d, want %d", inBlobs, newChunks)
	}

	// The manifest lists each dictionary blob it uses, as v1 does.
	v1Layers := map[string]string{} // digest -> chunk count annotation
	for _, l := range v1.Manifest.Layers {
		v1Layers[l.Digest.String()] = l.Annotations[rafs.AnnotationBlobChunks]
	}
	listed := map[rafs.Digest]bool{}
	for _, l := range v2.Manifest.Layers[:len(v2.Manifest.Layers)-1] {
		d, err := rafs.ParseDigest(l.Digest.String())
		if err != nil {
			t.Fatal(err)
		}
		listed[d] = true
		if string(l.MediaType) != rafs.MediaTypeBlob {
			t.Errorf("layer %s media type: got %s, want %s", l.Digest, l.MediaType, rafs.MediaTypeBlob)
		}
		if want, ok := v1Layers[l.Digest.String()]; ok && l.Annotations[rafs.AnnotationBlobChunks] != want {
			t.Errorf("dictionary layer %s chunk count: got %s, want %s", l.Digest, l.Annotations[rafs.AnnotationBlobChunks], want)
		}
	}
	for b := range usedV1Blobs {
		if !listed[b] {
			t.Errorf("v2 uses dictionary blob %s, which its manifest does not list", b)
		}
	}

	// The copied blobs are complete and the tree is the one converted
	// without a dictionary.
	mustCheck(t, v2)
	sameTree(t, unpack(t, plain), unpack(t, v2))
}

// TestChunkDictErrors: dictionaries that cannot be used fail the
// conversion with a reason, and write nothing.
func TestChunkDictErrors(t *testing.T) {
	t.Parallel()
	src := writeCorpus(t, "base-v1", "base-v2")
	zstdDict := "oci:" + filepath.Join(t.TempDir(), "zstd") + ":base-v1-rafs"
	mustConvert(t, "oci:"+src+":base-v1", zstdDict, options(t))
	rawOpts := options(t)
	rawOpts.Build.Uncompressed = true
	rawDict := "oci:" + filepath.Join(t.TempDir(), "raw") + ":base-v1-rafs"
	mustConvert(t, "oci:"+src+":base-v1", rawDict, rawOpts)
	localDict := writeBootstrap(t, zstdDict)

	for _, tc := range []struct {
		name         string
		dict         string
		uncompressed bool
		want         string
		wantErr      error
	}{
		{name: "local bootstrap", dict: localDict, want: "comes from a local chunk dictionary"},
		{name: "other compressor", dict: rawDict, want: "chunk dictionary uses none, this build zstd"},
		{name: "other compressor raw build", dict: zstdDict, uncompressed: true, want: "chunk dictionary uses zstd, this build none"},
		{name: "missing", dict: "oci:" + filepath.Join(t.TempDir(), "nothing") + ":x", want: "chunk dictionary", wantErr: transport.ErrNotFound},
		{name: "plain image", dict: "oci:" + src + ":base-v1", want: "chunk dictionary", wantErr: image.ErrNotRAFS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := options(t)
			opts.ChunkDict = tc.dict
			opts.Build.Uncompressed = tc.uncompressed
			dst := "oci:" + filepath.Join(t.TempDir(), "out") + ":base-v2-rafs"
			_, err := convert.Convert(t.Context(), "oci:"+src+":base-v2", dst, opts)
			t.Logf("error: %v", err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("got error %v, want one wrapping %v", err, tc.wantErr)
			}
			requireAbsent(t, dst, opts.WorkDir)
		})
	}
}

// writeBootstrap stores the uncompressed bootstrap of the RAFS image ref
// as a file, alone in a new directory, and returns its path.
func writeBootstrap(t *testing.T, ref string) string {
	t.Helper()
	img := mustOpen(t, ref)
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := image.BootstrapLayer(img.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := transport.Blob(t.Context(), r, desc.Digest, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := image.ReadBootstrap(rc, desc)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := strconv.Atoi(desc.Annotations[rafs.AnnotationBootstrapSize]); len(data) != want {
		t.Fatalf("bootstrap: got %d bytes, want %d", len(data), want)
	}
	p := filepath.Join(t.TempDir(), "bootstrap")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
