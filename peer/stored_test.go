package peer

import (
	"bytes"
	"testing"

	"damselfly/rafs"
)

// An image converted with blake3-stored digests, compressed chunks and
// raw ones, goes origin -> node A -> node B: each node checks the chunks
// by their stored bytes, B gets them all from A, and what B delivers
// decodes to the image's content.
func TestPeerServesStoredDigest(t *testing.T) {
	t.Parallel()
	var all []rafs.Chunk
	var imgs []image
	for i, text := range []bool{true, false} {
		img := buildImageOpts(t, uint64(40+i), rafs.DigestStoredBlake3, text)
		compressed := 0
		for _, c := range img.chunks {
			if c.Algo() != rafs.DigestStoredBlake3 {
				t.Fatalf("chunk %s of algorithm %s", c.Digest, c.Algo())
			}
			if c.Compressed() {
				compressed++
			}
		}
		if text && compressed == 0 || !text && compressed != 0 {
			t.Fatalf("text %v: %d compressed chunks", text, compressed)
		}
		imgs = append(imgs, img)
		all = append(all, img.chunks...)
	}
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	for _, img := range imgs {
		o := newOrigin(t, img.dir)
		if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
			t.Fatalf("A: %v", err)
		}
		before := o.bytes.Load()
		var got [][]byte
		err := b.Node.ReadChunks(ctx, o.ref(), img.blob, img.chunks, func(i int, c rafs.Chunk, stored []byte) error {
			plain := make([]byte, c.Size)
			if err := rafs.DecodeChunk(c, stored, plain); err != nil {
				t.Errorf("chunk %d: %v", i, err)
			}
			got = append(got, bytes.Clone(stored))
			return nil
		})
		if err != nil {
			t.Fatalf("B: %v", err)
		}
		if len(got) != len(img.chunks) {
			t.Fatalf("B delivered %d chunks, want %d", len(got), len(img.chunks))
		}
		if n := o.bytes.Load() - before; n != 0 {
			t.Errorf("origin sent %d bytes for B, want 0", n)
		}
	}
	if s := b.Stats(); s.PeerBytes != storedBytes(all) || s.OriginBytes != 0 {
		t.Errorf("B stats %+v: want all %d bytes from peers", s, storedBytes(all))
	}
}
