package peer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/rafstest"
	"damselfly/scheduler"
)

// TestCachedChunkOfAnotherBlobNotServed: a chunk the node holds as part
// of one blob (a private image's, read by an allowed client) is not
// served, from its cache or by its exchange server, to a read that names
// it as part of another blob (one the reader may read): the node fetches
// it as part of that blob, which fails, and no byte of it goes out.
// Naming the chunk's own blob still gets it from the cache.
func TestCachedChunkOfAnotherBlobNotServed(t *testing.T) {
	t.Parallel()
	priv := buildImageSeed(t, 1)
	pub := buildImageSeed(t, 2)
	data, err := os.ReadFile(filepath.Join(pub.dir, hexOf(pub.blob)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(priv.dir, hexOf(pub.blob)), data, 0o644); err != nil {
		t.Fatal(err)
	}
	o := newOrigin(t, priv.dir) // serves both blobs
	sched := newScheduler(t)
	key := clusterKey(t)
	a := newNode(t, key, sched, nodeOpts{})
	// b's forged read waits out the scheduler's tree_starve_after (8 s)
	// for a parent that will never serve it before the origin settles it:
	// a fetch deadline of 10 s left too little room on a loaded machine
	// (the error came back transient, the deadline's).
	b := newNode(t, key, sched, nodeOpts{cfg: func(c *NodeConfig) { c.FetchDeadline = 30 * time.Second }})
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o.ref(), priv.blob, priv.chunks); err != nil {
		t.Fatalf("a reads the private blob: %v", err)
	}
	// a holds the public blob too, so the scheduler names it as a parent
	// for the public blob's chunks.
	if err := readAll(ctx, a.Node, o.ref(), pub.blob, pub.chunks); err != nil {
		t.Fatalf("a reads the public blob: %v", err)
	}
	if err := sched.Register("probe", scheduler.PeerInfo{Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rafstest.Eventually(t, 20*time.Second, "the scheduler to name a for the public blob", func() bool {
		ans, err := sched.Parents("probe", pub.blob, []uint32{pub.chunks[0].Ordinal}, time.Now())
		return err == nil && len(ans.Parents) == 1 && ans.Parents[0].ID == a.h.ID().String()
	})

	secret := priv.chunks[2]
	forged := secret // described where a chunk of the public blob is
	forged.CompressedOffset = pub.chunks[0].CompressedOffset
	forged.Ordinal = pub.chunks[0].Ordinal
	sentBefore := a.srv.Stats().ChunksSent
	for _, n := range []*node{a, b} {
		var got int
		err := n.ReadChunks(ctx, o.ref(), pub.blob, []rafs.Chunk{forged}, func(int, rafs.Chunk, []byte) error {
			got++
			return nil
		})
		var ce *chunkapi.ChunkError
		if got != 0 || err == nil || !errors.As(err, &ce) || ce.Transient {
			t.Errorf("a private chunk named as part of the public blob, read on %s: delivered %d, err %v; want none and a permanent error",
				map[*node]string{a: "a (which caches it)", b: "b (whose parent a caches it)"}[n], got, err)
		}
	}
	if sent := a.srv.Stats().ChunksSent - sentBefore; sent != 0 {
		t.Errorf("a's exchange server sent %d chunks for the forged read, want 0", sent)
	}
	// As part of its own blob it is served, from a's cache.
	before := a.Stats()
	if err := readAll(ctx, a.Node, o.ref(), priv.blob, []rafs.Chunk{secret}); err != nil {
		t.Fatalf("the chunk as part of its own blob: %v", err)
	}
	if after := a.Stats(); after.CacheChunks != before.CacheChunks+1 {
		t.Errorf("the chunk as part of its own blob: %d from the cache, want 1", after.CacheChunks-before.CacheChunks)
	}
}
