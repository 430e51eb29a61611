package peer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"damselfly/peer/fetch"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/rafstest"
	"damselfly/scheduler"
)

func TestNodeConfigValidate(t *testing.T) {
	if err := DefaultNode().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	var zero NodeConfig
	if err := zero.Validate(); err == nil {
		t.Fatal("zero config validated")
	}
}

func TestNodeConfigHedgeDelay(t *testing.T) {
	c := DefaultNode()
	c.HedgeDelay = 0 // hedging off
	if err := c.Validate(); err != nil {
		t.Fatalf("hedge_delay 0: %v", err)
	}
	c.HedgeDelay = -time.Second
	c.SlowAvoidDuration = 0
	err := c.Validate()
	for _, field := range []string{"hedge_delay", "slow_avoid_duration"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("got %v, want an error naming %s", err, field)
		}
	}
}

// A chunk another process puts into the node cache while this node waits
// for it is taken from the cache at the next round, and announced: the
// node holds it now, and other peers (here one waiting for the same
// chunk) are pointed at it instead of waiting for the origin fetch.
func TestChunkCachedMidFetchIsAnnounced(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st := newSchedulerWith(t, func(c *scheduler.Config) { c.OriginTimeout = time.Minute })
	// Announcements are slowed, so a read let go before its chunk was
	// announced would be seen below.
	a := newNode(t, clusterKey(t), st, nodeOpts{
		router: func(r *router) fetch.Router { return slowAnnounceRouter{r, 50 * time.Millisecond} },
	})
	c := img.chunks[3]
	const other, third = "other-peer", "third-peer"
	for _, id := range []string{other, third} {
		if err := st.Register(id, scheduler.PeerInfo{Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// other holds the origin turn for c, and never fetches it.
	if ans, err := st.Parents(other, img.blob, []uint32{c.Ordinal}, time.Now()); err != nil || !slices.Equal(ans.Origin, []uint32{c.Ordinal}) {
		t.Fatalf("other's route: %+v, %v", ans, err)
	}
	done := make(chan error, 1)
	go func() { done <- readAll(testCtx(t), a.Node, o.ref(), img.blob, []rafs.Chunk{c}) }()
	rafstest.Eventually(t, 20*time.Second, "a to wait for other's origin fetch", func() bool {
		for _, v := range st.OriginFetches(time.Now()) {
			if v.Chunk == c.Ordinal && slices.Contains(v.Waiters, a.h.ID().String()) {
				return true
			}
		}
		return false
	})
	// As another read of the blob on this node does when it has fetched
	// the chunk (keep: cache it, record it as part of the blob), before
	// its own announcement went out. (A chunk another process put in the
	// cache is not known to be part of the blob, and is not taken:
	// TestCachedChunkOfAnotherBlobNotServed.)
	blob, err := os.ReadFile(filepath.Join(img.dir, hexOf(img.blob)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cache.PutChunk(c, blob[c.CompressedOffset:][:c.CompressedSize]); err != nil {
		t.Fatal(err)
	}
	a.hold.add(img.blob, c.Ordinal, cache.KeyOf(c))
	if err := <-done; err != nil {
		t.Fatalf("read: %v", err)
	}
	if o.reqs.Load() != 0 {
		t.Errorf("a asked the origin %d times, want none", o.reqs.Load())
	}
	announced, _, _ := a.router.snapshot()
	if !slices.Contains(announced[img.blob], c.Ordinal) {
		t.Fatalf("a did not announce the chunk it took from the cache: %v", announced[img.blob])
	}
	// The announcement reaches the scheduler at the client's next flush.
	var ans scheduler.Answer
	rafstest.Eventually(t, 20*time.Second, "the scheduler to route the third peer to a", func() bool {
		ans, err = st.Parents(third, img.blob, []uint32{c.Ordinal}, time.Now())
		return err == nil && len(ans.Parents) == 1 && ans.Parents[0].ID == a.h.ID().String()
	})
	if len(ans.Wait) != 0 || len(ans.Origin) != 0 {
		t.Errorf("third peer's route: %+v; want only a as its parent", ans)
	}
}

// slowAnnounceRouter passes announcements on after a pause.
type slowAnnounceRouter struct {
	*router
	pause time.Duration
}

func (r slowAnnounceRouter) Announce(blob rafs.Digest, chunks []uint32) {
	time.Sleep(r.pause)
	r.router.Announce(blob, chunks)
}
