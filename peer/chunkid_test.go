package peer

import (
	"context"
	"errors"
	"testing"
	"time"

	"damselfly/proxy"
	"damselfly/proxy/upstream"
	"damselfly/rafs"
)

// flipAlgo is c described with the other digest algorithm, the same 32
// bytes of digest: a read that names a chunk under the wrong algorithm,
// by mistake or to do harm.
func flipAlgo(c rafs.Chunk) rafs.Chunk {
	c.Flags ^= rafs.ChunkBlake3
	return c
}

// readOne reads c alone through n and returns the error.
func readOne(ctx context.Context, n *Node, up upstream.Ref, blob rafs.Digest, c rafs.Chunk) error {
	return n.ReadChunks(ctx, up, blob, []rafs.Chunk{c}, func(int, rafs.Chunk, []byte) error { return nil })
}

// wantPermanent fails unless err names chunk 0 as failed for good.
func wantPermanent(t *testing.T, what string, err error) {
	t.Helper()
	var ce *proxy.ChunkError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: got %v, want a *proxy.ChunkError", what, err)
	}
	if ce.Transient {
		t.Errorf("%s: got a transient error (%v), want a permanent one", what, err)
	}
}

// TestOriginMismatchFailsFast: bytes from the origin that do not verify
// against the read's description (another digest, or the other digest
// algorithm) fail the read at once, as permanent, after one request to
// the origin, not after FetchDeadline of retries.
func TestOriginMismatchFailsFast(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	wrong := img.chunks[2]
	wrong.Digest[5] ^= 0x10
	for _, tt := range []struct {
		name string
		c    rafs.Chunk
	}{
		{"wrong digest", wrong},
		{"other algorithm", flipAlgo(img.chunks[2])},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, img.dir)
			n := newNode(t, clusterKey(t), newScheduler(t), nodeOpts{cfg: func(c *NodeConfig) {
				c.FetchDeadline = 6 * time.Second
			}})
			ctx := testCtx(t)
			start := time.Now()
			err := readOne(ctx, n.Node, o.ref(), img.blob, tt.c)
			took := time.Since(start)
			wantPermanent(t, "read", err)
			if !errors.Is(err, rafs.ErrDigestMismatch) {
				t.Errorf("got %v, want it to wrap rafs.ErrDigestMismatch", err)
			}
			if took > 2*time.Second {
				t.Errorf("the read took %v, want well under FetchDeadline (6s)", took)
			}
			if got := o.reqs.Load(); got < 1 || got > 2 {
				t.Errorf("the origin was asked %d times, want 1 (2 at most)", got)
			}
			if n.cache.Has(tt.c.Digest) {
				t.Error("bytes that failed verification were cached")
			}
		})
	}
}
