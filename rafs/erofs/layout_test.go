package erofs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/erofs"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// TestReadAtMatchesWriteTo reads every image of the corpus at random
// offsets and lengths (block edges, metadata, file bytes and padding)
// and checks each read against the image WriteTo produced.
func TestReadAtMatchesWriteTo(t *testing.T) {
	for name, img := range convertCorpus(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			im, err := erofs.Build(img.Bootstrap())
			if err != nil {
				t.Fatal(err)
			}
			var whole bytes.Buffer
			if _, err := im.WriteTo(ctx, &whole, img.ChunkSource()); err != nil {
				t.Fatal(err)
			}
			if int64(whole.Len()) != im.Size() || im.Size()%erofs.BlockSize != 0 {
				t.Fatalf("image is %d bytes, Size says %d (block size %d)", whole.Len(), im.Size(), erofs.BlockSize)
			}
			want := whole.Bytes()
			r := rand.New(rand.NewPCG(1, uint64(len(want))))
			for i := range 600 {
				var src rafs.ChunkSource = img.ChunkSource()
				if i%2 == 1 {
					src = rangeSource{src} // the path that reads parts of chunks
				}
				off := r.Int64N(im.Size())
				if i%3 == 0 {
					off = off / erofs.BlockSize * erofs.BlockSize
				}
				n := 1 + r.IntN(3*erofs.BlockSize)
				p := make([]byte, n)
				got, err := im.ReadAt(ctx, p, off, src)
				end := min(off+int64(n), im.Size())
				if int64(got) != end-off {
					t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d", n, off, got, err, end-off)
				}
				if (end < off+int64(n)) != errors.Is(err, io.EOF) || (err != nil && !errors.Is(err, io.EOF)) {
					t.Fatalf("ReadAt(%d bytes at %d of %d): error %v", n, off, im.Size(), err)
				}
				if !bytes.Equal(p[:got], want[off:end]) {
					t.Fatalf("ReadAt(%d bytes at %d) differs from the written image", n, off)
				}
			}
		})
	}
}

// rangeSource adds ReadChunkAt (erofs.ChunkRangeSource) to a source.
type rangeSource struct{ rafs.ChunkSource }

func (r rangeSource) ReadChunkAt(ctx context.Context, c rafs.Chunk, off int, p []byte) error {
	buf := make([]byte, c.Size)
	if err := r.ReadChunk(ctx, c, buf); err != nil {
		return err
	}
	copy(p, buf[off:])
	return nil
}

// TestUnsupportedXattr: an xattr name EROFS has no index for makes Build
// fail with ErrUnsupported, so a caller can serve the image another way.
func TestUnsupportedXattr(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	layout := filepath.Join(dir, "oci")
	img := edges()
	img.Name = "odd-xattr"
	img.Layers[0] = append(img.Layers[0], img.Layers[0][0].Xattr("company.label", "x"))
	if err := rafstest.WriteOCILayout(ctx, layout, img); err != nil {
		t.Fatal(err)
	}
	dst := "oci:" + layout + ":rafs"
	if _, err := convert.Convert(ctx, "oci:"+layout+":odd-xattr", dst, convert.Options{
		Build: rafs.BuildOptions{ChunkSize: 64 << 10}, WorkDir: dir,
	}); err != nil {
		t.Fatal(err)
	}
	ri, err := image.Open(ctx, dst, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ri.Close()
	if _, err := erofs.Build(ri.Bootstrap()); !errors.Is(err, erofs.ErrUnsupported) {
		t.Fatalf("Build = %v, want ErrUnsupported", err)
	}
}
