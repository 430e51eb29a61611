package fusemount

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// The warm read benchmark: every file of a 64 MiB image of compressible
// text read through the Fetcher with the node cache full and memory
// empty, by 4 readers in 128 KiB reads (as the kernel sends them), with
// readahead as the FUSE adapter triggers it. Beside it, in the same
// iteration, the same bytes read from plain files of the same sizes (in
// the page cache, as the node cache's files are): the cost of the read
// path over a copy. Reported: MB/s of content for each, and their ratio.
func BenchmarkWarmRead(b *testing.B) {
	const files, fileSize = 8, 8 << 20
	boot, blobs := buildTextImage(b, files, fileSize)
	c, err := cache.Open(cache.Default(filepath.Join(b.TempDir(), "cache")))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	plain := b.TempDir()
	var inodes []rafs.Inode
	for i := range files {
		in, err := boot.LookupPath(fmt.Sprintf("file%d", i))
		if err != nil {
			b.Fatal(err)
		}
		inodes = append(inodes, in)
	}
	blob, err := boot.Blob(0)
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(rafs.BlobPath(blobs, blob.Digest))
	if err != nil {
		b.Fatal(err)
	}
	for i := range boot.ChunkCount() {
		ck, err := boot.Chunk(i)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.PutChunk(ck, data[ck.CompressedOffset:][:ck.CompressedSize]); err != nil {
			b.Fatal(err)
		}
	}
	for i, in := range inodes {
		content := make([]byte, 0, in.Size)
		for j := range in.DataCount {
			seg, err := boot.FileSegment(in, j)
			if err != nil {
				b.Fatal(err)
			}
			dec := make([]byte, seg.Chunk.Size)
			if err := rafs.DecodeChunk(seg.Chunk, data[seg.Chunk.CompressedOffset:][:seg.Chunk.CompressedSize], dec); err != nil {
				b.Fatal(err)
			}
			content = append(content, dec[seg.Off:seg.Off+seg.Len]...)
		}
		if err := os.WriteFile(filepath.Join(plain, fmt.Sprintf("file%d", i)), content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	const readers, readSize = 4, 128 << 10
	var fetcherTime, plainTime time.Duration
	b.ResetTimer()
	for range b.N {
		f, err := NewFetcher(boot, c, nil, FetcherConfig{ReadaheadChunks: 4}, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		parallelFiles(b, readers, len(inodes), func(i int) error {
			return readSequential(f, boot, inodes[i])
		})
		fetcherTime += time.Since(start)
		f.Close()

		start = time.Now()
		parallelFiles(b, readers, len(inodes), func(i int) error {
			fd, err := os.Open(filepath.Join(plain, fmt.Sprintf("file%d", i)))
			if err != nil {
				return err
			}
			defer fd.Close()
			_, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{fd}, make([]byte, readSize))
			return err
		})
		plainTime += time.Since(start)
	}
	mb := float64(files*fileSize) * float64(b.N) / 1e6
	b.ReportMetric(mb/fetcherTime.Seconds(), "fetcher-MB/s")
	b.ReportMetric(mb/plainTime.Seconds(), "plain-MB/s")
	b.ReportMetric(plainTime.Seconds()/fetcherTime.Seconds(), "fetcher/plain")
}

// parallelFiles runs read(i) for i in [0, n) on readers goroutines.
func parallelFiles(b *testing.B, readers, n int, read func(i int) error) {
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := read(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// buildTextImage builds a one-layer image of files of compressible text
// (words drawn at random from a small vocabulary, about 3:1 under zstd)
// with the default chunk size, its blobs in the returned directory.
func buildTextImage(b *testing.B, files, size int) (*rafs.Bootstrap, string) {
	b.Helper()
	words := strings.Fields("the quick brown fox jumps over a lazy dog while numpy scipy torch import from def return class self init data chunk blob peer cache mount read write")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range files {
		var text bytes.Buffer
		for text.Len() < size {
			text.WriteString(words[r.IntN(len(words))])
			if r.IntN(12) == 0 {
				fmt.Fprintf(&text, " %d\n", r.Uint32())
			} else {
				text.WriteByte(' ')
			}
		}
		h := &tar.Header{Name: fmt.Sprintf("file%d", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size), ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(h); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(text.Bytes()[:size]); err != nil {
			b.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	layer := rafs.LayerSource{Name: "layer0", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}
	res, err := rafs.Build(b.Context(), []rafs.LayerSource{layer}, rafs.BuildOptions{BlobDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	boot, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return boot, dir
}
