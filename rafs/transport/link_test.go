package transport

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// localLayer is a layer kept in a file, as the converter's blobs are.
type localLayer struct {
	path   string
	digest v1.Hash
	size   int64
}

func (l *localLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *localLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *localLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *localLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.path) }
func (l *localLayer) Size() (int64, error)                 { return l.size, nil }
func (l *localLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
func (l *localLayer) LocalFile() string                    { return l.path }

// newLocalLayer writes n random bytes to a private file in dir.
func newLocalLayer(t *testing.T, dir string, n int) (*localLayer, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	sum := sha256.Sum256(b)
	h, err := v1.NewHash(fmt.Sprintf("sha256:%x", sum))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, h.Hex)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &localLayer{path: p, digest: h, size: int64(n)}, b
}

// TestOCILinksLocalFiles checks that a layer kept in a local file is
// linked into an oci: layout on the same file system rather than copied,
// readable by all, and that it is copied when it
// cannot be linked.
func TestOCILinksLocalFiles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		link     func(string, string) error
		wantSame bool
	}{
		{"same file system", os.Link, true},
		{"link refused", func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EXDEV} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := linkFile
			linkFile = tc.link
			defer func() { linkFile = old }()

			work := t.TempDir()
			l, want := newLocalLayer(t, work, 64<<10)
			img, err := mutate.AppendLayers(empty.Image, l)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "layout")
			r := mustParse(t, "oci:"+dir+":v1")
			if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
				t.Fatal(err)
			}
			blob := filepath.Join(dir, "blobs", "sha256", l.digest.Hex)
			fi, err := os.Stat(blob)
			if err != nil {
				t.Fatal(err)
			}
			src, err := os.Stat(l.path)
			if err != nil {
				t.Fatal(err)
			}
			if same := os.SameFile(fi, src); same != tc.wantSame {
				t.Errorf("layout blob is the work file: %v, want %v", same, tc.wantSame)
			}
			if tc.wantSame && fi.Mode().Perm() != 0o644 {
				t.Errorf("layout blob mode %v, want 0644", fi.Mode().Perm())
			}
			// The work directory goes away after a conversion; the
			// layout keeps its blob.
			if err := os.RemoveAll(work); err != nil {
				t.Fatal(err)
			}
			got, err := ReadImage(t.Context(), r, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := digest(t, got), digest(t, img); g != w {
				t.Errorf("read back digest %s, want %s", g, w)
			}
			_, b := firstLayer(t, got)
			if !bytes.Equal(b, want) {
				t.Error("the layout's blob differs from the layer written")
			}
		})
	}
}

// TestOCILinkSkipsWrongSize checks that a local file whose size is not the
// layer's is not linked in under the layer's digest.
func TestOCILinkSkipsWrongSize(t *testing.T) {
	work := t.TempDir()
	l, _ := newLocalLayer(t, work, 4096)
	l.size = 4095
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if _, err := ociOpen(dir); err != nil {
		t.Fatal(err)
	}
	if err := ociLinkBlobs(dir, img); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "blobs", "sha256", l.digest.Hex)); !os.IsNotExist(err) {
		t.Errorf("a file of the wrong size was linked in (stat: %v)", err)
	}
}
