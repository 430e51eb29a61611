package fusemount

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// The read planner of the mount is not one pure function: rafsFS.Read
// cuts a read of (file, offset, length) into chunk segments
// (ReadChunkAt calls) and the Fetcher turns each miss into a backend
// request for a run of chunks adjacent in the blob (Fetcher.plan, which
// consults memory, the node cache and the flights). TestReadPlan drives
// both through their smallest seams: rafsFS.Read called directly (no
// kernel; Open registers a handle), over a recording ChunkReader around
// a real Fetcher, over a Backend that reads byte ranges from the blob
// files and records each request. What it pins is the plan: the
// segments read and the ranges fetched, for a fresh Fetcher per case.

// planChunk is the chunk size of the planner's image, and planAmplify
// the Fetcher's AmplifyIO: three whole chunks.
const (
	planChunk   = rafs.MinChunkSize
	planAmplify = 3 * planChunk
)

// planImage is a two-layer image built uncompressed, so stored offsets
// are chunk sizes:
//
//	blob 0: chunks 0-6 big (6 chunks and 100 bytes), 7 zeros (dup's),
//	        8 the batch of small files
//	blob 1: chunks 9-10 next, 11 and 12 mixed's own (its middle chunk
//	        is big's chunk 2, in blob 0)
type planImage struct {
	boot  *rafs.Bootstrap
	blobs *rafs.DirBlobs
	files map[string][]byte // path -> content
}

func buildPlanImage(t *testing.T) *planImage {
	t.Helper()
	rnd := func(seed uint64, n int) []byte {
		r := rand.New(rand.NewPCG(seed, seed))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	big := rnd(1, 6*planChunk+100)
	files := map[string][]byte{
		"/big":   big,
		"/dup":   make([]byte, 3*planChunk),
		"/small": rnd(2, 1000),
		"/tiny":  []byte("tiny\n"),
		"/next":  rnd(3, 2*planChunk),
		"/mixed": slices.Concat(rnd(4, planChunk), big[2*planChunk:3*planChunk], rnd(5, planChunk)),
	}
	layer := func(names ...string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, n := range names {
			h := &tar.Header{Name: n[1:], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(1700000000, 0)}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(files[n]); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	var srcs []rafs.LayerSource
	for i, b := range [][]byte{layer("/big", "/dup", "/small", "/tiny"), layer("/next", "/mixed")} {
		srcs = append(srcs, rafs.LayerSource{Name: fmt.Sprint("layer", i), Open: func(context.Context) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}})
	}
	dir := t.TempDir()
	res, err := rafs.Build(t.Context(), srcs, rafs.BuildOptions{ChunkSize: planChunk, Uncompressed: true, BlobDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	boot, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blobs := rafs.NewDirBlobs(dir)
	t.Cleanup(func() { blobs.Close() })
	return &planImage{boot: boot, blobs: blobs, files: files}
}

// recordingBackend reads byte ranges of the blob files and records each
// request as the chunks it covers.
type recordingBackend struct {
	img  *planImage
	mu   sync.Mutex
	reqs []string
}

func (r *recordingBackend) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, describeRange(r.img.boot, blob.Index, uint64(off), uint64(len(p))))
	r.mu.Unlock()
	return "test", r.img.blobs.ReadBlob(ctx, blob, off, p)
}

// describeRange names a byte range of a blob by the chunks it covers.
func describeRange(b *rafs.Bootstrap, blob uint32, off, n uint64) string {
	var in []uint32
	for i := range b.ChunkCount() {
		c, _ := b.Chunk(i)
		if c.Blob == blob && c.CompressedOffset >= off && c.CompressedOffset+uint64(c.CompressedSize) <= off+n {
			in = append(in, i)
		}
	}
	return fmt.Sprintf("blob %d bytes %d+%d: chunks %v", blob, off, n, in)
}

// recordingReader records the segments rafsFS.Read asks for.
type recordingReader struct {
	ChunkReader
	mu   sync.Mutex
	segs []string
}

func (r *recordingReader) ReadChunkAt(ctx context.Context, c rafs.Chunk, off int, p []byte) error {
	r.mu.Lock()
	r.segs = append(r.segs, fmt.Sprintf("chunk %d bytes %d+%d", c.Index, off, len(p)))
	r.mu.Unlock()
	return r.ChunkReader.ReadChunkAt(ctx, c, off, p)
}

func TestReadPlan(t *testing.T) {
	img := buildPlanImage(t)
	const cs = planChunk
	for _, tt := range []struct {
		name      string
		file      string
		off, size uint64
		mem       []uint32 // chunks in the Fetcher's memory before the read
		cached    []uint32 // chunks in the node cache before the read
		busy      []uint32 // chunks another caller is fetching during the read
		segs      []string // the ReadChunkAt calls, in order
		fetches   []string // the backend requests, in order
	}{{
		name: "inside one chunk", file: "/big", off: 100, size: 4096,
		segs:    []string{"chunk 0 bytes 100+4096"},
		fetches: []string{"blob 0 bytes 0+196608: chunks [0 1 2]"},
	}, {
		name: "across a chunk boundary", file: "/big", off: cs - 10, size: 20,
		segs:    []string{"chunk 0 bytes 65526+10", "chunk 1 bytes 0+10"},
		fetches: []string{"blob 0 bytes 0+196608: chunks [0 1 2]"},
	}, {
		name: "whole file: runs up to AmplifyIO, then past the file's end in the blob", file: "/big", off: 0, size: 6*cs + 100,
		segs: []string{"chunk 0 bytes 0+65536", "chunk 1 bytes 0+65536", "chunk 2 bytes 0+65536", "chunk 3 bytes 0+65536",
			"chunk 4 bytes 0+65536", "chunk 5 bytes 0+65536", "chunk 6 bytes 0+100"},
		fetches: []string{"blob 0 bytes 0+196608: chunks [0 1 2]", "blob 0 bytes 196608+196608: chunks [3 4 5]",
			"blob 0 bytes 393216+66641: chunks [6 7 8]"},
	}, {
		name: "up to EOF", file: "/big", off: 6*cs + 50, size: 50,
		segs:    []string{"chunk 6 bytes 50+50"},
		fetches: []string{"blob 0 bytes 393216+66641: chunks [6 7 8]"},
	}, {
		name: "across EOF: cut at the file's end", file: "/big", off: 6*cs + 50, size: 4096,
		segs:    []string{"chunk 6 bytes 50+50"},
		fetches: []string{"blob 0 bytes 393216+66641: chunks [6 7 8]"},
	}, {
		name: "at EOF", file: "/big", off: 6*cs + 100, size: 4096,
	}, {
		name: "beyond EOF", file: "/big", off: 10 * cs, size: 4096,
	}, {
		name: "zero length", file: "/big", off: 100, size: 0,
	}, {
		name: "a chunk in memory ends a run and is not fetched", file: "/big", off: 0, size: 4 * cs,
		mem:     []uint32{1},
		segs:    []string{"chunk 0 bytes 0+65536", "chunk 1 bytes 0+65536", "chunk 2 bytes 0+65536", "chunk 3 bytes 0+65536"},
		fetches: []string{"blob 0 bytes 0+65536: chunks [0]", "blob 0 bytes 131072+196608: chunks [2 3 4]"},
	}, {
		name: "a chunk in the node cache ends a run and is not fetched", file: "/big", off: 0, size: 4 * cs,
		cached:  []uint32{2},
		segs:    []string{"chunk 0 bytes 0+65536", "chunk 1 bytes 0+65536", "chunk 2 bytes 0+65536", "chunk 3 bytes 0+65536"},
		fetches: []string{"blob 0 bytes 0+131072: chunks [0 1]", "blob 0 bytes 196608+196608: chunks [3 4 5]"},
	}, {
		name: "a chunk being fetched ends a run", file: "/big", off: 0, size: 100,
		busy:    []uint32{2},
		segs:    []string{"chunk 0 bytes 0+100"},
		fetches: []string{"blob 0 bytes 0+131072: chunks [0 1]"},
	}, {
		name: "everything at hand: no fetch", file: "/big", off: cs, size: 2 * cs,
		mem: []uint32{1}, cached: []uint32{2},
		segs: []string{"chunk 1 bytes 0+65536", "chunk 2 bytes 0+65536"},
	}, {
		name: "the same chunk three times: one fetch", file: "/dup", off: 0, size: 3 * cs,
		segs:    []string{"chunk 7 bytes 0+65536", "chunk 7 bytes 0+65536", "chunk 7 bytes 0+65536"},
		fetches: []string{"blob 0 bytes 393316+66541: chunks [7 8]"},
	}, {
		name: "a small file is a slice of its batch chunk", file: "/tiny", off: 1, size: 100,
		segs:    []string{"chunk 8 bytes 1001+4"},
		fetches: []string{"blob 0 bytes 458852+1005: chunks [8]"},
	}, {
		name: "chunks in two blobs: runs never cross a blob", file: "/mixed", off: 0, size: 3 * cs,
		segs:    []string{"chunk 11 bytes 0+65536", "chunk 2 bytes 0+65536", "chunk 12 bytes 0+65536"},
		fetches: []string{"blob 1 bytes 131072+131072: chunks [11 12]", "blob 0 bytes 131072+196608: chunks [2 3 4]"},
	}, {
		name: "the last chunks of a blob", file: "/next", off: cs, size: cs,
		segs:    []string{"chunk 10 bytes 0+65536"},
		fetches: []string{"blob 1 bytes 65536+196608: chunks [10 11 12]"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			be := &recordingBackend{img: img}
			var c *cache.Cache
			if len(tt.cached) > 0 {
				c = openCache(t, t.TempDir())
			}
			f, err := NewFetcher(img.boot, c, be, FetcherConfig{AmplifyIO: planAmplify}, NewMetrics(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			for _, i := range tt.mem {
				ch, err := img.boot.Chunk(i)
				if err != nil {
					t.Fatal(err)
				}
				f.mem.Add(i, newDecoded(planStored(t, img, ch)))
			}
			for _, i := range tt.cached {
				ch, err := img.boot.Chunk(i)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.PutChunk(ch, planStored(t, img, ch)); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tt.busy {
				// Another caller's flight, ended when the case is.
				fs, run, _, _ := f.flights.Join(t.Context(), i)
				if run == nil {
					t.Fatalf("chunk %d already in flight", i)
				}
				t.Cleanup(func() {
					f.failed(fs[0], context.Canceled)
					f.flights.Leave(fs...)
				})
			}
			rec := &recordingReader{ChunkReader: f}
			fsys := newRafsFS(img.boot, rec, "readplan", time.Second, slog.New(slog.DiscardHandler))
			in, err := img.boot.LookupPath(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			var open fuse.OpenOut
			if st := fsys.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: uint64(in.Ino)}}, &open); st != fuse.OK {
				t.Fatalf("open: %v", st)
			}
			buf := make([]byte, tt.size)
			res, st := fsys.Read(nil, &fuse.ReadIn{Fh: open.Fh, Offset: tt.off, Size: uint32(tt.size)}, buf)
			if st != fuse.OK {
				t.Fatalf("read: %v", st)
			}
			got, st := res.Bytes(buf)
			if st != fuse.OK {
				t.Fatalf("read result: %v", st)
			}
			content := img.files[tt.file]
			want := content[min(tt.off, uint64(len(content))):min(tt.off+tt.size, uint64(len(content)))]
			if !bytes.Equal(got, want) {
				t.Errorf("read %d bytes, want %d, or the wrong ones", len(got), len(want))
			}
			if !slices.Equal(rec.segs, tt.segs) {
				t.Errorf("segments read:\n  %s\nwant:\n  %s", strings.Join(rec.segs, "\n  "), strings.Join(tt.segs, "\n  "))
			}
			f.Close() // waits for the runs' tails
			if !slices.Equal(be.reqs, tt.fetches) {
				t.Errorf("backend requests:\n  %s\nwant:\n  %s", strings.Join(be.reqs, "\n  "), strings.Join(tt.fetches, "\n  "))
			}
		})
	}
}

// planStored returns a chunk's stored bytes (raw: the image is
// uncompressed), as the blob holds them.
func planStored(t *testing.T, img *planImage, c rafs.Chunk) []byte {
	t.Helper()
	blob, err := img.boot.Blob(c.Blob)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, c.CompressedSize)
	if err := img.blobs.ReadBlob(t.Context(), blob, int64(c.CompressedOffset), p); err != nil {
		t.Fatal(err)
	}
	return p
}
