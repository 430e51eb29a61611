package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"damselfly/rafs"
)

// layerFileBytes is the size of the files of the synthetic image.
const layerFileBytes = 8 << 20

// blobChunks is one blob of the image and its chunks in offset order.
type blobChunks struct {
	blob   rafs.Blob
	chunks []rafs.Chunk
}

// image is the synthetic image the nodes pull: what a node learns from
// the bootstrap (every blob and chunk), built with rafs.Build.
type image struct {
	repo  string
	blobs []blobChunks
	bytes int64 // stored bytes of every blob: what a full pull moves
	chunk int64 // the largest stored chunk
}

// buildImage builds an image of mib MiB of random content (so chunks are
// stored raw and the blobs are as big as the content) in a few layers,
// one blob each, into blobDir.
func buildImage(ctx context.Context, blobDir string, mib int, seed uint64) (*image, error) {
	total := int64(mib) << 20
	layers := int(min(4, max(1, total/(16<<20))))
	var srcs []rafs.LayerSource
	for l := range layers {
		size := total / int64(layers)
		if l == layers-1 {
			size = total - size*int64(layers-1)
		}
		srcs = append(srcs, rafs.LayerSource{Name: fmt.Sprintf("layer%d", l), Open: func(context.Context) (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			done := make(chan struct{})
			go func() {
				defer close(done)
				pw.CloseWithError(writeLayer(pw, l, size, seed))
			}()
			return &layerReader{PipeReader: pr, done: done}, nil
		}})
	}
	res, err := rafs.Build(ctx, srcs, rafs.BuildOptions{BlobDir: blobDir, Uncompressed: true})
	if err != nil {
		return nil, fmt.Errorf("build image: %w", err)
	}
	boot, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		return nil, fmt.Errorf("decode bootstrap: %w", err)
	}
	defer boot.Close()
	return imageOf(boot)
}

// imageOf lists the bootstrap's blobs and their chunks.
func imageOf(boot *rafs.Bootstrap) (*image, error) {
	blobs, err := boot.Blobs()
	if err != nil {
		return nil, err
	}
	img := &image{repo: "bench/distribution"}
	for _, b := range blobs {
		img.blobs = append(img.blobs, blobChunks{blob: b})
		img.bytes += int64(b.CompressedSize)
	}
	for i := range boot.ChunkCount() {
		c, err := boot.Chunk(i)
		if err != nil {
			return nil, err
		}
		if int(c.Blob) >= len(img.blobs) {
			return nil, fmt.Errorf("chunk %d: blob %d of %d", i, c.Blob, len(img.blobs))
		}
		img.blobs[c.Blob].chunks = append(img.blobs[c.Blob].chunks, c)
		img.chunk = max(img.chunk, int64(c.CompressedSize))
	}
	for _, b := range img.blobs {
		slices.SortFunc(b.chunks, func(x, y rafs.Chunk) int { return int(x.Ordinal) - int(y.Ordinal) })
	}
	return img, nil
}

// layerReader is a generated layer's stream; Close stops its writer and
// waits for it.
type layerReader struct {
	*io.PipeReader
	done chan struct{}
}

func (r *layerReader) Close() error {
	err := r.PipeReader.Close()
	<-r.done
	return err
}

// writeLayer writes layer l's tar: files of layerFileBytes (the last one
// shorter) of random bytes seeded by seed and l, so that layers share no
// chunk and every build is the same.
func writeLayer(w io.Writer, l int, size int64, seed uint64) error {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	key[8] = byte(l)
	rng := rand.NewChaCha8(key)
	tw := tar.NewWriter(w)
	buf := make([]byte, 1<<20)
	for f := 0; size > 0; f++ {
		n := min(size, layerFileBytes)
		size -= n
		h := &tar.Header{Name: fmt.Sprintf("layer%d/file%03d", l, f), Typeflag: tar.TypeReg, Mode: 0o644, Size: n,
			ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		for n > 0 {
			k := min(n, int64(len(buf)))
			rng.Read(buf[:k])
			if _, err := tw.Write(buf[:k]); err != nil {
				return err
			}
			n -= k
		}
	}
	return tw.Close()
}
