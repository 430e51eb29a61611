package peer

import (
	"slices"
	"testing"

	"damselfly/rafs"
)

// ReadChunksStaged hands over each fetched chunk verified; once its kept
// returns, the chunk is in the node cache and announced. ReadChunks
// delivers a fetched chunk only then.
func TestReadChunksStaged(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	key := clusterKey(t)
	for _, staged := range []bool{true, false} {
		a := newNode(t, key, newScheduler(t), nodeOpts{}) // alone: every chunk from the origin
		check := func(i int, c rafs.Chunk, stored []byte) {
			if err := rafs.DecodeChunk(c, stored, make([]byte, c.Size)); err != nil || c.Digest != img.chunks[i].Digest {
				t.Fatalf("staged %v: chunk %d delivered unverified or wrong: %v", staged, i, err)
			}
			announced, _, _ := a.router.snapshot()
			if !a.cache.Has(c.Digest) || !slices.Contains(announced[img.blob], c.Ordinal) {
				t.Fatalf("staged %v: chunk %d kept or delivered before it was cached and announced", staged, i)
			}
		}
		next := 0
		var err error
		if staged {
			err = a.ReadChunksStaged(testCtx(t), o.ref(), img.blob, img.chunks, func(i int, c rafs.Chunk, stored []byte, kept func() error) error {
				if i != next {
					t.Fatalf("delivered chunk %d, want %d", i, next)
				}
				next++
				if err := kept(); err != nil {
					return err
				}
				check(i, c, stored)
				return nil
			})
		} else {
			err = a.ReadChunks(testCtx(t), o.ref(), img.blob, img.chunks, func(i int, c rafs.Chunk, stored []byte) error {
				next++
				check(i, c, stored)
				return nil
			})
		}
		if err != nil || next != len(img.chunks) {
			t.Fatalf("staged %v: %d of %d chunks delivered, %v", staged, next, len(img.chunks), err)
		}
		if got, want := a.Stats().OriginBytes, storedBytes(img.chunks); got != want {
			t.Errorf("staged %v: %d bytes from the origin, want %d", staged, got, want)
		}
	}
}
