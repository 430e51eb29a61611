package peer

import (
	"slices"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/rafstest"
)

// ReadChunks delivers a fetched chunk once it is cached and announced;
// ReadChunksEarly delivers it verified, and caches and announces it too.
func TestReadChunksEarly(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	key := clusterKey(t)
	for _, early := range []bool{true, false} {
		a := newNode(t, key, newScheduler(t), nodeOpts{}) // alone: every chunk from the origin
		kept := func(c rafs.Chunk) bool {
			announced, _, _ := a.router.snapshot()
			return a.cache.Has(cache.KeyOf(c)) && slices.Contains(announced[img.blob], c.Ordinal)
		}
		next := 0
		deliver := func(i int, c rafs.Chunk, stored []byte) error {
			if i != next {
				t.Fatalf("early %v: delivered chunk %d, want %d", early, i, next)
			}
			next++
			if err := rafs.DecodeChunk(c, stored, make([]byte, c.Size)); err != nil || c.Digest != img.chunks[i].Digest {
				t.Fatalf("early %v: chunk %d delivered unverified or wrong: %v", early, i, err)
			}
			if !early && !kept(c) {
				t.Fatalf("chunk %d delivered before it was cached and announced", i)
			}
			return nil
		}
		var err error
		if early {
			err = a.ReadChunksEarly(testCtx(t), o.ref(), img.blob, img.chunks, deliver)
		} else {
			err = a.ReadChunks(testCtx(t), o.ref(), img.blob, img.chunks, deliver)
		}
		if err != nil || next != len(img.chunks) {
			t.Fatalf("early %v: %d of %d chunks delivered, %v", early, next, len(img.chunks), err)
		}
		for _, c := range img.chunks {
			rafstest.Eventually(t, 20*time.Second, "every chunk cached and announced", func() bool { return kept(c) })
		}
		if got, want := a.Stats().OriginBytes, storedBytes(img.chunks); got != want {
			t.Errorf("early %v: %d bytes from the origin, want %d", early, got, want)
		}
	}
}
