package peer

import (
	"slices"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/scheduler"
)

// copies is how many chunks of blob the scheduler has holders for,
// counted once per holder.
func copies(st *scheduler.State, blob rafs.Digest) int64 {
	for _, b := range st.Blobs() {
		if b.Blob == blob {
			return b.Copies
		}
	}
	return 0
}

// A chunk the node's cache evicts is dropped from its holdings, and the
// drop sent, when the cache evicts it: not at the next holdings check
// (an hour away here).
func TestEvictionDroppedAtOnce(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{
		cacheCapacity: storedBytes(img.chunks) / 2,
		cfg:           func(c *NodeConfig) { c.HoldingsCheckInterval = time.Hour },
	})
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
	// The writes go on in the background after the read; wait for the
	// holdings to settle on what the cache has.
	var inCache, held []uint32
	for deadline := time.Now().Add(10 * time.Second); ; {
		inCache = inCache[:0]
		for _, c := range img.chunks {
			if a.cache.Has(cache.KeyOf(c)) {
				inCache = append(inCache, c.Ordinal)
			}
		}
		held = held[:0]
		for _, h := range a.hold.snapshot()[img.blob] {
			held = append(held, h.Ordinal)
		}
		if slices.Equal(held, inCache) && copies(st, img.blob) == int64(len(inCache)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holdings %v and %d chunks at the scheduler, want the cache's %v", held, copies(st, img.blob), inCache)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, dropped, _ := a.router.snapshot()
	if len(inCache) == len(img.chunks) || len(dropped[img.blob]) == 0 {
		t.Fatalf("cache holds %d of %d chunks, %d dropped: the cache did not evict, the test tested nothing",
			len(inCache), len(img.chunks), len(dropped[img.blob]))
	}
	if s := a.Stats(); s.HoldingsDropped != int64(len(dropped[img.blob])) {
		t.Errorf("HoldingsDropped = %d, want %d", s.HoldingsDropped, len(dropped[img.blob]))
	}
	t.Logf("measured: %d of %d chunks left in the cache, %d drops sent at eviction", len(inCache), len(img.chunks), len(dropped[img.blob]))
}

// A held chunk that is gone from the cache without this node's eviction
// (another process sharing the directory deleted it) is dropped when a
// peer asks for it, and the requester's "not found" report is then not
// taken for a lie: when the node fetches the chunk again, its
// announcement counts at once, though refutations last a minute.
func TestMissedChunkDroppedAndExcused(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st := newSchedulerWith(t, func(c *scheduler.Config) { c.RefuteDuration = time.Minute })
	key := clusterKey(t)
	hour := func(c *NodeConfig) { c.HoldingsCheckInterval = time.Hour }
	a := newNode(t, key, st, nodeOpts{cfg: hour})
	b := newNode(t, key, st, nodeOpts{cfg: hour})
	ctx := testCtx(t)
	n := int64(len(img.chunks))
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
	waitCopies(t, st, img.blob, n)
	gone := img.chunks[3]
	if err := a.cache.Remove(cache.KeyOf(gone)); err != nil {
		t.Fatal(err)
	}
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
	_, dropped, _ := a.router.snapshot()
	if !slices.Equal(dropped[img.blob], []uint32{gone.Ordinal}) {
		t.Fatalf("a dropped %v, want [%d]", dropped[img.blob], gone.Ordinal)
	}
	missing := 0
	_, _, reports := b.router.snapshot()
	for _, r := range reports {
		missing += len(r.Missing)
	}
	if missing != 1 {
		t.Fatalf("b reported %d missing chunks, want 1", missing)
	}
	waitCopies(t, st, img.blob, 2*n-1)
	// a fetches the chunk again (from b): its announcement is recorded.
	if err := readAll(ctx, a.Node, o.ref(), img.blob, []rafs.Chunk{gone}); err != nil {
		t.Fatal(err)
	}
	waitCopies(t, st, img.blob, 2*n)
}

// waitCopies waits up to 10 s for the scheduler to count want chunks of
// blob held.
func waitCopies(t *testing.T, st *scheduler.State, blob rafs.Digest, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for copies(st, blob) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler counts %d chunks held, want %d", copies(st, blob), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
