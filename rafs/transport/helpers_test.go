package transport

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// newRegistry starts an in-process registry on 127.0.0.1, with its handler
// wrapped by wrap if that is not nil, and returns its host:port.
func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// mustParse parses s with default options.
func mustParse(t *testing.T, s string) Ref {
	t.Helper()
	r, err := Parse(s, Options{})
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return r
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// digest returns the digest of an image or index.
func digest(t *testing.T, obj interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	d, err := obj.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// platformIndex returns an index holding one random image per platform,
// and those images in the same order.
func platformIndex(t *testing.T, platforms ...v1.Platform) (v1.ImageIndex, []v1.Image) {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	var imgs []v1.Image
	for _, p := range platforms {
		img := randomImage(t)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
		imgs = append(imgs, img)
	}
	return idx, imgs
}

// firstLayer returns the digest and compressed bytes of img's first layer.
func firstLayer(t *testing.T, img v1.Image) (v1.Hash, []byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return digest(t, layers[0]), b
}

var (
	linuxAMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	linuxARM64 = v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	linuxS390X = v1.Platform{OS: "linux", Architecture: "s390x"}
)
