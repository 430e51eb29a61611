package image_test

import (
	"errors"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// allocBytes is the bytes this process has allocated so far.
func allocBytes() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// maxBombAlloc is the most opening one bomb may allocate: the reader's
// buffers for the 1 MiB it may inflate before the ratio check, the zstd
// decoder and the manifest. The bombs inflate to gigabytes.
const maxBombAlloc = 16 << 20

// The fixture's names are the format's.
func TestBombNamesMatchFormat(t *testing.T) {
	for got, want := range map[string]string{
		rafstest.MediaTypeBootstrap:        rafs.MediaTypeBootstrap,
		rafstest.MediaTypeBlob:             rafs.MediaTypeBlob,
		rafstest.LegacyMediaTypeBootstrap:  rafs.LegacyMediaTypeBootstrap,
		rafstest.LegacyMediaTypeBlob:       rafs.LegacyMediaTypeBlob,
		rafstest.AnnotationVersion:         rafs.AnnotationVersion,
		rafstest.AnnotationBootstrapSize:   rafs.AnnotationBootstrapSize,
		rafstest.AnnotationBootstrapDigest: rafs.AnnotationBootstrapDigest,
	} {
		if got != want {
			t.Errorf("rafstest says %q, rafs %q", got, want)
		}
	}
}

// Opening an image whose bootstrap layer is a bomb (a layer under
// 200 KiB inflating to gigabytes, or asking for them in a header or an
// annotation) fails with a clear error, allocating a few MiB at most.
// Every reader of registry images (mount, preheat, inspect, check,
// convert --chunk-dict) opens them this way.
func TestOpenRefusesBootstrapBombs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oci")
	if err := rafstest.WriteBombLayout(dir); err != nil {
		t.Fatal(err)
	}
	for _, b := range rafstest.Bombs() {
		t.Run(b.Name, func(t *testing.T) {
			before := allocBytes()
			start := time.Now()
			img, err := image.Open(t.Context(), "oci:"+dir+":"+b.Name, image.Options{})
			took := time.Since(start)
			grew := allocBytes() - before
			if err == nil {
				img.Close()
				t.Fatalf("%d-byte bomb opened", len(b.Layer))
			}
			if !strings.Contains(err.Error(), b.Want) || !strings.Contains(err.Error(), "bootstrap") {
				t.Errorf("got %v, want an error about the bootstrap saying %q", err, b.Want)
			}
			if grew > maxBombAlloc {
				t.Errorf("refusing allocated %d bytes, want at most %d", grew, maxBombAlloc)
			}
			t.Logf("%d-byte layer refused in %v, allocating %d bytes: %v", len(b.Layer), took, grew, err)
		})
	}
}

// The limit is the caller's: a real image over it is refused, naming
// the limit, and opens under a larger one.
func TestOpenBootstrapLimit(t *testing.T) {
	layout, res := convertCorpus(t, "base-v1", convert.Options{})
	ref := "oci:" + layout + ":base-v1-rafs"
	small := res.BootstrapBytes - 1
	_, err := image.Open(t.Context(), ref, image.Options{MaxBootstrapSize: small})
	if !errors.Is(err, rafs.ErrTooLarge) || !strings.Contains(err.Error(), "the limit is") {
		t.Fatalf("limit %d under a %d-byte bootstrap: got %v, want ErrTooLarge", small, res.BootstrapBytes, err)
	}
	mustOpen(t, ref, image.Options{MaxBootstrapSize: small + 1})
}

// A layer that says it is larger than any bootstrap within the limit
// compresses to is refused without reading a byte.
func TestReadBootstrapLayerSizeOutOfRange(t *testing.T) {
	desc := v1.Descriptor{MediaType: rafs.MediaTypeBootstrap, Size: 1 << 40}
	_, err := image.ReadBootstrapLimit(unreadable{t}, desc, 0)
	if err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("a 1 TiB layer: got %v, want it refused", err)
	}
	desc.Size = 2 << 20
	if _, err := image.ReadBootstrapLimit(unreadable{t}, desc, 1<<20); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("a 2 MiB layer under a 1 MiB limit: got %v, want it refused", err)
	}
}

type unreadable struct{ t *testing.T }

func (u unreadable) Read([]byte) (int, error) {
	u.t.Error("the layer was read")
	return 0, io.EOF
}
