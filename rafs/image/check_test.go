package image_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/transport"
)

// copyLayout copies an OCI layout, so a test may damage its blobs.
func copyLayout(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "oci")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func check(t *testing.T, img *image.Image) *image.CheckResult {
	t.Helper()
	res, err := img.Check(t.Context(), 2, nil)
	if err != nil {
		t.Fatalf("check %s: %v", img.Ref, err)
	}
	return res
}

// usersOf lists, in walk order, the regular files that use chunk index k:
// an oracle for Problem.Paths.
func usersOf(t *testing.T, b *rafs.Bootstrap, k uint32) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(rafs.NewFS(t.Context(), b, nil), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		in, err := b.LookupPath("/" + p)
		if err != nil {
			return err
		}
		for i := range in.DataCount {
			c, err := b.FileChunk(in, i)
			if err != nil {
				return err
			}
			if c.Index == k {
				out = append(out, "/"+p)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckClean: an intact image has no problems, read from its layout or
// as a local bootstrap over the layout's blob directory.
func TestCheckClean(t *testing.T) {
	t.Parallel()
	layout, _ := convertCorpus(t, "base-v1", convert.Options{})
	ref := "oci:" + layout + ":base-v1-rafs"
	boot := writeBootstrap(t, ref)
	for _, tc := range []struct {
		name string
		ref  string
		opts image.Options
	}{
		{"oci", ref, image.Options{}},
		{"local bootstrap", boot, image.Options{BlobDir: filepath.Join(layout, "blobs", "sha256")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			img := mustOpen(t, tc.ref, tc.opts)
			res := check(t, img)
			if len(res.Problems) != 0 {
				t.Errorf("got %d problems, want none; first: %+v", len(res.Problems), res.Problems[0])
			}
			b := img.Bootstrap()
			var stored uint64
			for i := range b.BlobCount() {
				bl, err := b.Blob(i)
				if err != nil {
					t.Fatal(err)
				}
				stored += bl.CompressedSize
			}
			if res.Blobs != int(b.BlobCount()) || res.Chunks != int(b.ChunkCount()) || res.Bytes != stored {
				t.Errorf("checked %d blobs, %d chunks, %d bytes; want %d, %d, %d", res.Blobs, res.Chunks, res.Bytes, b.BlobCount(), b.ChunkCount(), stored)
			}
		})
	}
}

// TestCheckFlippedByte: a byte flipped inside one chunk's stored bytes is
// reported as that chunk, with the files using it, and as the blob's
// digest; nothing else is.
func TestCheckFlippedByte(t *testing.T) {
	t.Parallel()
	layout, _ := convertCorpus(t, "sizes", convert.Options{})
	for _, tc := range []struct {
		name       string
		file       string
		chunk      uint32
		compressed bool
		minUsers   int
	}{
		{"raw chunk of one file", "/sizes/2chunks", 1, false, 1},
		{"raw chunk of two files", "/sizes/chunk", 0, false, 2},
		{"compressed chunk", "/sizes/zeros", 0, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layout := copyLayout(t, layout)
			img := mustOpen(t, "oci:"+layout+":sizes-rafs", image.Options{})
			b := img.Bootstrap()
			in, err := b.LookupPath(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			c, err := b.FileChunk(in, tc.chunk)
			if err != nil {
				t.Fatal(err)
			}
			if c.Compressed() != tc.compressed {
				t.Fatalf("chunk %d of %s: compressed %v, want %v", tc.chunk, tc.file, c.Compressed(), tc.compressed)
			}
			bl, err := b.Blob(c.Blob)
			if err != nil {
				t.Fatal(err)
			}
			users := usersOf(t, b, c.Index)
			if len(users) < tc.minUsers {
				t.Fatalf("chunk %d is used by %q, want at least %d files", c.Index, users, tc.minUsers)
			}
			flipByte(t, blobPath(layout, bl), int64(c.CompressedOffset)+int64(c.CompressedSize)/2)

			res := check(t, img)
			if len(res.Problems) != 2 {
				t.Fatalf("got %d problems, want 2 (the chunk and the blob): %+v", len(res.Problems), res.Problems)
			}
			blobP, chunkP := res.Problems[0], res.Problems[1]
			if blobP.Chunk != -1 || blobP.Blob != bl.Digest.String() || !strings.Contains(blobP.Error, "want "+bl.Digest.String()) {
				t.Errorf("first problem: got %+v, want blob %s as a whole (chunk -1) with a digest error", blobP, bl.Digest)
			}
			if chunkP.Chunk != int64(c.Index) || chunkP.Digest != c.Digest.String() || chunkP.Blob != bl.Digest.String() || chunkP.Offset != c.CompressedOffset {
				t.Errorf("second problem: got chunk %d %s in %s at %d, want chunk %d %s in %s at %d",
					chunkP.Chunk, chunkP.Digest, chunkP.Blob, chunkP.Offset, c.Index, c.Digest, bl.Digest, c.CompressedOffset)
			}
			if !slices.Equal(chunkP.Paths, users) {
				t.Errorf("paths: got %q, want %q", chunkP.Paths, users)
			}
		})
	}
}

// TestCheckMissingOrShortBlob: every chunk of a missing blob is reported;
// of a truncated blob, every chunk that reaches past the cut.
func TestCheckMissingOrShortBlob(t *testing.T) {
	t.Parallel()
	layout, _ := convertCorpus(t, "base-v1", convert.Options{})
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, size uint64)
		bad    func(c rafs.Chunk, size uint64) bool // chunks of the damaged blob to report
		error  string
	}{
		{
			name:   "missing",
			damage: func(t *testing.T, p string, _ uint64) { mustRemove(t, p) },
			bad:    func(rafs.Chunk, uint64) bool { return true },
			error:  "blob unavailable",
		},
		{
			name: "truncated",
			damage: func(t *testing.T, p string, size uint64) {
				if err := os.Truncate(p, int64(size/2)); err != nil {
					t.Fatal(err)
				}
			},
			bad:   func(c rafs.Chunk, size uint64) bool { return c.CompressedOffset+uint64(c.CompressedSize) > size/2 },
			error: "", // the chunk at the cut fails to read; the ones after it: "blob ends early"
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layout := copyLayout(t, layout)
			img := mustOpen(t, "oci:"+layout+":base-v1-rafs", image.Options{})
			b := img.Bootstrap()
			if b.BlobCount() < 2 {
				t.Fatalf("image has %d blobs, want 2 or more", b.BlobCount())
			}
			bl, err := b.Blob(0)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, blobPath(layout, bl), bl.CompressedSize)

			want := map[int64]string{} // chunk index -> digest
			for i := range b.ChunkCount() {
				c, err := b.Chunk(i)
				if err != nil {
					t.Fatal(err)
				}
				if c.Blob == 0 && tc.bad(c, bl.CompressedSize) {
					want[int64(c.Index)] = c.Digest.String()
				}
			}
			if len(want) == 0 {
				t.Fatal("no chunk is damaged: the test proves nothing")
			}
			res := check(t, img)
			got := map[int64]string{}
			for _, p := range res.Problems {
				if p.Blob != bl.Digest.String() || p.Chunk < 0 {
					t.Errorf("unexpected problem %+v", p)
					continue
				}
				if _, dup := got[p.Chunk]; dup {
					t.Errorf("chunk %d reported twice", p.Chunk)
				}
				got[p.Chunk] = p.Digest
				if !strings.Contains(p.Error, tc.error) {
					t.Errorf("chunk %d: got error %q, want it to contain %q", p.Chunk, p.Error, tc.error)
				}
				if len(p.Paths) == 0 {
					t.Errorf("chunk %d: got no paths, want the files using it", p.Chunk)
				}
			}
			for k, d := range want {
				if got[k] != d {
					t.Errorf("chunk %d: reported with digest %q, want %s", k, got[k], d)
				}
			}
			if len(got) != len(want) {
				t.Errorf("got %d chunk problems, want %d", len(got), len(want))
			}
		})
	}
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// writeBootstrap stores the uncompressed bootstrap of the RAFS image ref
// in a new directory and returns its path.
func writeBootstrap(t *testing.T, ref string) string {
	t.Helper()
	img := mustOpen(t, ref, image.Options{})
	desc, err := image.BootstrapLayer(img.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := transport.Blob(t.Context(), mustParse(t, ref), desc.Digest, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := image.ReadBootstrap(rc, desc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bootstrap")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
