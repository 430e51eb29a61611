package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/sample"
	"damselfly/rafs/transport"
)

// image is a source image pushed to the registry twice: as it is (tag
// "plain") and converted to RAFS (tag "rafs"), with umoci's unpacking of
// the source as the reference every mount is compared with.
type image struct {
	src    rafstest.Image
	repo   string // "cluster/NAME"
	layout string // OCI layout holding the source, tag "src"
	umoci  string // umoci's rootfs of the source
}

// ref is the image's reference through host (a node's gate).
func (im *image) ref(host, tag string) string {
	return "docker://" + host + "/" + im.repo + ":" + tag
}

// pushImage writes src to a layout, unpacks it with umoci, converts it to
// RAFS with chunks of chunkSize into the registry and pushes the source
// too.
func pushImage(t testing.TB, reg *registry, name string, src rafstest.Image, chunkSize uint32) *image {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	src.Name = "src"
	im := &image{src: src, repo: "cluster/" + name, layout: filepath.Join(dir, "oci")}
	if err := rafstest.WriteOCILayout(ctx, im.layout, src); err != nil {
		t.Fatal(err)
	}
	root, err := rafstest.UmociUnpack(ctx, im.layout, "src", filepath.Join(dir, "umoci"))
	if err != nil {
		t.Fatal(err)
	}
	im.umoci = root
	srcRef := "oci:" + im.layout + ":src"
	if _, err := convert.Convert(ctx, srcRef, im.ref(reg.host, "rafs"), convert.Options{
		Build: rafs.BuildOptions{ChunkSize: chunkSize}, WorkDir: t.TempDir(),
	}); err != nil {
		t.Fatalf("convert %s: %v", name, err)
	}
	r, err := transport.Parse(srcRef, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := transport.ReadImage(ctx, r, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := transport.Parse(im.ref(reg.host, "plain"), transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.WriteImage(ctx, dst, img, transport.Options{}); err != nil {
		t.Fatal(err)
	}
	return im
}

// sampleImage is the realistic sample (a base OS, Python, an app with a
// model) at a size that keeps the suite fast.
func sampleImage() rafstest.Image {
	return sample.Generate("src", sample.Options{Seed: 7, Scale: 0.15})
}

// corpusImage returns the conformance corpus image called name (layer
// semantics: whiteouts, hardlinks, odd names, devices...).
func corpusImage(t testing.TB, name string) rafstest.Image {
	t.Helper()
	for _, img := range rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: rafs.MinChunkSize}) {
		if img.Name == name {
			return img
		}
	}
	t.Fatalf("corpus has no image %q", name)
	return rafstest.Image{}
}
