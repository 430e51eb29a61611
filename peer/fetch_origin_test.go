package peer

import (
	"context"
	"slices"
	"sync"
	"testing"

	"damselfly/peer/fetch"
	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// cuttingOrigin is a StreamingOrigin over the test origin that reports
// the bytes of a read as they are copied out, in pieces of step, and
// cuts its first read short after cut bytes with a transient error. It
// records the range of every read.
type cuttingOrigin struct {
	step, cut int

	mu    sync.Mutex
	reads [][2]int64 // off, len
}

var _ fetch.StreamingOrigin = (*cuttingOrigin)(nil)

func (o *cuttingOrigin) ReadRange(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte) error {
	return o.ReadRangeFunc(ctx, ref, blob, off, p, func(int) {})
}

func (o *cuttingOrigin) ReadRangeFunc(ctx context.Context, ref registry.Ref, blob rafs.Digest, off int64, p []byte, progress func(n int)) error {
	o.mu.Lock()
	first := len(o.reads) == 0
	o.reads = append(o.reads, [2]int64{off, int64(len(p))})
	o.mu.Unlock()
	tmp := make([]byte, len(p))
	if err := (httpOrigin{}).ReadRange(ctx, ref, blob, off, tmp); err != nil {
		return err
	}
	end := len(p)
	if first {
		end = min(end, o.cut)
	}
	for k := 0; k < end; {
		n := min(o.step, end-k)
		copy(p[k:k+n], tmp[k:k+n])
		k += n
		progress(k)
	}
	if end < len(p) {
		return &registry.StatusError{Code: 503, Msg: "cut short"}
	}
	return nil
}

// From a streaming origin, the chunks of a read that arrived whole before
// it failed are kept; only the rest is asked for again.
func TestOriginStreamKeepsWholeChunks(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	a := newNode(t, clusterKey(t), newScheduler(t), nodeOpts{})
	byOff := slices.Clone(img.chunks)
	slices.SortFunc(byOff, func(x, y rafs.Chunk) int { return int(int64(x.CompressedOffset) - int64(y.CompressedOffset)) })
	// Cut inside the third chunk: the first two arrive whole.
	third := byOff[2]
	cut := int(third.CompressedOffset-byOff[0].CompressedOffset) + int(third.CompressedSize)/2
	origin := &cuttingOrigin{step: 4096, cut: cut}
	nd, err := NewNode(testConfig(), a.h, a.cache, nil, origin, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if err := readAll(testCtx(t), nd, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
	if got, want := nd.Stats().OriginBytes, storedBytes(img.chunks); got != want {
		t.Errorf("%d bytes delivered from the origin, want %d (each chunk once)", got, want)
	}
	origin.mu.Lock()
	defer origin.mu.Unlock()
	if len(origin.reads) < 2 {
		t.Fatalf("origin reads %v: want the cut one and another", origin.reads)
	}
	if got, want := origin.reads[1][0], int64(third.CompressedOffset); got != want {
		t.Errorf("after the cut, the origin was asked from byte %d, want %d (the first chunk that did not arrive whole)", got, want)
	}
}
