package peer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"damselfly/peer/cache"
	"damselfly/peer/exchange"
	"damselfly/rafs"
	"damselfly/scheduler"
)

func TestOriginRuns(t *testing.T) {
	cs := []rafs.Chunk{
		{Ordinal: 2, CompressedOffset: 200, CompressedSize: 100},
		{Ordinal: 0, CompressedOffset: 0, CompressedSize: 100},
		{Ordinal: 1, CompressedOffset: 100, CompressedSize: 100},
		{Ordinal: 4, CompressedOffset: 500, CompressedSize: 100}, // gap before it
		{Ordinal: 5, CompressedOffset: 600, CompressedSize: 1000},
	}
	runs := originRuns(cs, 300)
	type span struct{ off, end int64 }
	var got []span
	for _, r := range runs {
		got = append(got, span{r.off, r.end})
	}
	want := []span{{0, 300}, {500, 600}, {600, 1600}}
	if len(got) != len(want) {
		t.Fatalf("got runs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("run %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestSplitBatches(t *testing.T) {
	var cs []rafs.Chunk
	for i := range exchange.MaxChunksPerBatch + 10 {
		cs = append(cs, rafs.Chunk{Ordinal: uint32(i), CompressedSize: 1, Size: 1})
	}
	if b := splitBatches(cs); len(b) != 2 || len(b[0]) != exchange.MaxChunksPerBatch {
		t.Errorf("got %d batches, want 2 with the first full", len(b))
	}
	big := []rafs.Chunk{{Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1},
		{Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1}}
	if b := splitBatches(big); len(b) != 2 {
		t.Errorf("got %d batches of 5 x 16 MiB, want 2", len(b))
	}
}

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
		router: func(r *router) Router { return slowAnnounceRouter{r, 50 * time.Millisecond} },
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
	waitFor(t, "a to wait for other's origin fetch", func() bool {
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
	waitFor(t, "the scheduler to route the third peer to a", func() bool {
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

// abandonRouter records Abandons.
type abandonRouter struct {
	*router
	mu        *sync.Mutex
	abandoned *[]uint32
}

func (r abandonRouter) Abandon(blob rafs.Digest, chunks []uint32) {
	r.mu.Lock()
	*r.abandoned = append(*r.abandoned, chunks...)
	r.mu.Unlock()
	r.router.Abandon(blob, chunks)
}

// Turns an answer grants for chunks the group no longer waits for go back
// at once when their flights are done (the chunk came another way, or
// failed), and are left to the announcement when the chunk is still
// being kept; pending chunks and chunks of no flight of the group are
// not touched.
func TestStrayTurnsGivenBack(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var abandoned []uint32
	n := newNode(t, clusterKey(t), newScheduler(t), nodeOpts{
		router: func(r *router) Router { return abandonRouter{r, &mu, &abandoned} },
	})
	fl := func(kept bool) *flight {
		return &flight{kept: kept, ready: make(chan struct{}), done: make(chan struct{})}
	}
	done, keeping, pending := fl(true), fl(false), fl(false)
	g := &group{blob: rafs.Digest{1}, all: map[uint32]*flight{1: done, 2: keeping, 3: pending}, pending: map[uint32]*flight{3: pending}}
	n.strayTurns(g, []uint32{1, 2, 3, 4})
	mu.Lock()
	got := slices.Clone(abandoned)
	mu.Unlock()
	if !slices.Equal(got, []uint32{1}) {
		t.Errorf("abandoned %v, want [1]", got)
	}
	if s := n.Stats(); s.StrayTurns != 1 {
		t.Errorf("StrayTurns = %d, want 1", s.StrayTurns)
	}
}
