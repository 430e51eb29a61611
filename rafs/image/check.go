package image

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"

	"damselfly/rafs"
)

// Problem is one chunk or blob that failed verification.
type Problem struct {
	Blob   string   `json:"blob"`
	Chunk  int64    `json:"chunk"` // chunk table index; -1 for the blob as a whole
	Digest string   `json:"digest,omitempty"`
	Offset uint64   `json:"offset"`
	Error  string   `json:"error"`
	Paths  []string `json:"paths,omitempty"` // files that use the chunk (first few)
}

// CheckResult counts what Check verified.
type CheckResult struct {
	Blobs    int       `json:"blobs"`
	Chunks   int       `json:"chunks"`
	Bytes    uint64    `json:"bytes"` // stored bytes read
	Problems []Problem `json:"problems"`
}

// Check validates the whole bootstrap, then reads every blob once from
// start to end, verifying each chunk in it that the bootstrap references
// and the blob's own digest. It returns an error only when checking could
// not proceed; what it found wrong is in Problems.
func (i *Image) Check(ctx context.Context, parallel int, progress func(int64)) (*CheckResult, error) {
	b := i.boot
	if err := b.Validate(); err != nil {
		return nil, err
	}
	byBlob := map[uint32][]rafs.Chunk{}
	for k := range b.ChunkCount() {
		c, err := b.Chunk(k)
		if err != nil {
			return nil, err
		}
		byBlob[c.Blob] = append(byBlob[c.Blob], c)
	}
	blobs, err := b.Blobs()
	if err != nil {
		return nil, err
	}
	res := &CheckResult{Blobs: len(blobs), Chunks: int(b.ChunkCount())}
	var mu sync.Mutex
	report := func(p Problem) {
		mu.Lock()
		res.Problems = append(res.Problems, p)
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, parallel))
	for _, bl := range blobs {
		chunks := byBlob[bl.Index]
		sort.Slice(chunks, func(a, c int) bool { return chunks[a].CompressedOffset < chunks[c].CompressedOffset })
		g.Go(func() error {
			n := i.checkBlob(gctx, bl, chunks, report, progress)
			mu.Lock()
			res.Bytes += n
			mu.Unlock()
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	sort.Slice(res.Problems, func(a, c int) bool {
		pa, pc := res.Problems[a], res.Problems[c]
		if pa.Blob != pc.Blob {
			return pa.Blob < pc.Blob
		}
		return pa.Chunk < pc.Chunk
	})
	if len(res.Problems) > 0 {
		if err := addPaths(b, res.Problems); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// checkBlob streams one blob and verifies its chunks in offset order.
func (i *Image) checkBlob(ctx context.Context, bl rafs.Blob, chunks []rafs.Chunk, report func(Problem), progress func(int64)) uint64 {
	rc, err := i.openBlob(ctx, bl)
	if err != nil {
		for _, c := range chunks {
			report(Problem{Blob: bl.Digest.String(), Chunk: int64(c.Index), Digest: c.Digest.String(), Offset: c.CompressedOffset, Error: "blob unavailable: " + err.Error()})
		}
		return 0
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(rc, h)
	var pos uint64
	var stored, out []byte
	for k, c := range chunks {
		if c.CompressedOffset < pos {
			// Overlapping chunks cannot come from the builder.
			report(Problem{Blob: bl.Digest.String(), Chunk: int64(c.Index), Digest: c.Digest.String(), Offset: c.CompressedOffset, Error: "overlaps the previous chunk"})
			continue
		}
		if _, err := io.CopyN(io.Discard, r, int64(c.CompressedOffset-pos)); err == nil {
			pos = c.CompressedOffset
			stored = append(stored[:0], make([]byte, c.CompressedSize)...)
			_, err = io.ReadFull(r, stored)
			pos += uint64(len(stored))
			if progress != nil {
				progress(int64(c.CompressedSize))
			}
			if err == nil {
				out = append(out[:0], make([]byte, c.Size)...)
				err = rafs.DecodeChunk(c, stored, out)
			}
			if err == nil {
				continue
			}
			report(Problem{Blob: bl.Digest.String(), Chunk: int64(c.Index), Digest: c.Digest.String(), Offset: c.CompressedOffset, Error: err.Error()})
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				continue
			}
			for _, rest := range chunks[k+1:] {
				report(Problem{Blob: bl.Digest.String(), Chunk: int64(rest.Index), Digest: rest.Digest.String(), Offset: rest.CompressedOffset, Error: "blob ends early"})
			}
			return pos
		} else {
			for _, rest := range chunks[k:] {
				report(Problem{Blob: bl.Digest.String(), Chunk: int64(rest.Index), Digest: rest.Digest.String(), Offset: rest.CompressedOffset, Error: "blob ends early: " + err.Error()})
			}
			return pos
		}
	}
	n, err := io.Copy(io.Discard, r)
	pos += uint64(n)
	if err != nil {
		report(Problem{Blob: bl.Digest.String(), Chunk: -1, Error: "read blob: " + err.Error()})
		return pos
	}
	if got := fmt.Sprintf("sha256:%x", h.Sum(nil)); got != bl.Digest.String() || pos != bl.CompressedSize {
		report(Problem{Blob: bl.Digest.String(), Chunk: -1, Error: fmt.Sprintf("blob is %s (%d bytes), want %s (%d bytes)", got, pos, bl.Digest, bl.CompressedSize)})
	}
	return pos
}

// openBlob streams a whole blob.
func (i *Image) openBlob(ctx context.Context, bl rafs.Blob) (io.ReadCloser, error) {
	switch br := i.blobs.(type) {
	case *registryBlobs:
		d, err := v1.NewHash(bl.Digest.String())
		if err != nil {
			return nil, err
		}
		rc, _, err := br.br.Blob(ctx, d)
		return rc, err
	case *rafs.DirBlobs:
		return os.Open(rafs.BlobPath(br.Dir, bl.Digest))
	}
	return nil, fmt.Errorf("blob source %T cannot stream whole blobs", i.blobs)
}

// addPaths names, for each problem chunk, the first few files using it.
func addPaths(b *rafs.Bootstrap, probs []Problem) error {
	want := map[int64][]int{}
	for k, p := range probs {
		if p.Chunk >= 0 {
			want[p.Chunk] = append(want[p.Chunk], k)
		}
	}
	fsys := rafs.NewFS(context.Background(), b, nil)
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		in := info.Sys().(rafs.Inode)
		for k := range in.DataCount {
			c, err := b.FileChunk(in, k)
			if err != nil {
				return err
			}
			for _, pi := range want[int64(c.Index)] {
				// A file that holds the chunk more than once is named once;
				// its chunks are visited together, so a repeat is the last.
				ps := probs[pi].Paths
				if len(ps) < 5 && (len(ps) == 0 || ps[len(ps)-1] != "/"+p) {
					probs[pi].Paths = append(ps, "/"+p)
				}
			}
		}
		return nil
	})
}
