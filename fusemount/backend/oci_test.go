package backend

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sync/errgroup"

	"damselfly/rafs"
)

// writeLayout writes blobs into an OCI layout's blobs/sha256 directory.
func writeLayout(t *testing.T, blobs ...[]byte) (string, []rafs.Blob) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out []rafs.Blob
	for _, data := range blobs {
		d := sha256.Sum256(data)
		if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", fmt.Sprintf("%x", d[:])), data, 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, rafs.Blob{Digest: d, CompressedSize: uint64(len(data))})
	}
	return dir, out
}

func TestOCIReads(t *testing.T) {
	t.Parallel()
	a, c := randomBytes(40, 100<<10), randomBytes(41, 5000)
	dir, blobs := writeLayout(t, a, c)
	b := newBackend(t, OCI(dir))
	tests := []struct {
		name string
		blob int
		data []byte
		off  int64
		n    int
	}{
		{"first byte", 0, a, 0, 1},
		{"middle", 0, a, 4096, 8192},
		{"to the end", 0, a, int64(len(a)) - 100, 100},
		{"whole small blob", 1, c, 0, len(c)},
	}
	for _, tt := range tests {
		if src := readAt(t, b, blobs[tt.blob], tt.data, tt.off, tt.n); src != SourceOCI {
			t.Errorf("%s: source %s, want %s", tt.name, src, SourceOCI)
		}
	}
	var g errgroup.Group
	for i := range 50 {
		g.Go(func() error {
			p := make([]byte, 1000)
			off := int64(i * 2000)
			if err := b.ReadBlob(t.Context(), blobs[0], off, p); err != nil {
				return err
			}
			if string(p) != string(a[off:off+1000]) {
				return fmt.Errorf("read at %d: wrong bytes", off)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats().OCI; st.Requests != uint64(len(tests)+50) || st.Errors != 0 {
		t.Errorf("stats: got %+v, want %d reads without errors", st, len(tests)+50)
	}
}

func TestOCIErrors(t *testing.T) {
	t.Parallel()
	data := randomBytes(42, 1000)
	dir, blobs := writeLayout(t, data)
	unknownSize := blobs[0]
	unknownSize.CompressedSize = 0
	tests := []struct {
		name string
		blob rafs.Blob
		off  int64
		n    int
		want error
	}{
		{"missing blob", rafs.Blob{Digest: rafs.Digest{9}}, 0, 10, ErrNotFound},
		{"past the recorded size", blobs[0], 990, 20, ErrRange},
		{"past the end of the file", unknownSize, 990, 20, ErrRange},
	}
	b := newBackend(t, OCI(dir))
	for _, tt := range tests {
		_, err := b.ReadBlobFrom(t.Context(), tt.blob, tt.off, make([]byte, tt.n))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
		var re *ReadError
		if !errors.As(err, &re) || re.Dir != dir {
			t.Errorf("%s: got %v, want a *ReadError naming the layout", tt.name, err)
		}
	}

	if _, err := New(OCI(filepath.Join(dir, "nope"))); err == nil {
		t.Error("New with a missing layout directory: got nil error")
	}
}

func TestOCIFileCache(t *testing.T) {
	t.Parallel()
	var all [][]byte
	for i := range maxOpenBlobs + 5 {
		all = append(all, randomBytes(uint64(100+i), 64))
	}
	dir, blobs := writeLayout(t, all...)
	b, err := New(OCI(dir))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for i, blob := range blobs {
			readAt(t, b, blob, all[i], int64(round), 10)
		}
	}
	b.oci.mu.Lock()
	open := len(b.oci.files)
	b.oci.mu.Unlock()
	if open > maxOpenBlobs {
		t.Errorf("%d files open, want at most %d", open, maxOpenBlobs)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.ReadBlob(t.Context(), blobs[0], 0, make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: got %v, want ErrClosed", err)
	}
}
