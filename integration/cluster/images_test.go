package cluster

import (
	"context"
	"testing"
	"time"

	"damselfly/integration/harness"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/sample"
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
	src.Name = "src"
	u, err := harness.Unpack(ctx, t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}
	im := &image{src: src, repo: "cluster/" + name, layout: u.Layout, umoci: u.Root}
	if _, err := convert.Convert(ctx, u.Ref(), im.ref(reg.host, "rafs"), convert.Options{
		Build: rafs.BuildOptions{ChunkSize: chunkSize}, WorkDir: t.TempDir(),
	}); err != nil {
		t.Fatalf("convert %s: %v", name, err)
	}
	if err := harness.Copy(ctx, u.Ref(), im.ref(reg.host, "plain")); err != nil {
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
