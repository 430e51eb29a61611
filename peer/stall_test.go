package peer

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/peer/exchange"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/route"
	"damselfly/scheduler"
)

// stallStore is a peer's exchange Store that, once armed, stalls on one
// chunk: the server has accepted the request and sent the records before
// it, then sends nothing more, the stream and connection left open, until
// the test ends.
type stallStore struct {
	*cache.Cache
	at      rafs.Digest
	armed   atomic.Bool
	stalls  atomic.Int64
	release chan struct{}
}

func (s *stallStore) Get(d cache.Key, dst []byte) (cache.Meta, []byte, error) {
	if s.armed.Load() && d.Digest == s.at {
		s.stalls.Add(1)
		<-s.release
	}
	return s.Cache.Get(d, dst)
}

// newStallingNode starts a peer whose exchange server stalls on chunk at
// once armed.
func newStallingNode(t *testing.T, key string, st *scheduler.State, at rafs.Digest) (*node, *stallStore) {
	t.Helper()
	ss := &stallStore{at: at, release: make(chan struct{})}
	n := newNode(t, key, st, nodeOpts{store: func(c *cache.Cache) exchange.Store {
		ss.Cache = c
		return ss
	}})
	// Runs before the server's Close (cleanups run last first), which
	// waits for the stalled handler.
	t.Cleanup(func() { close(ss.release) })
	return n, ss
}

func reportsAbout(rs []route.Outcome) (ok, failed, missing int) {
	for _, r := range rs {
		switch {
		case r.OK:
			ok++
		default:
			failed++
		}
		missing += len(r.Missing)
	}
	return
}

// A parent that stalls mid-stream while another holds the rest: the
// request is hedged to the other holder after HedgeDelay, the first copy
// of each chunk wins, and the stalled request is cancelled.
func TestStalledParentIsHedged(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	// Every parent counts as fast (loopback throughputs under load vary
	// a lot), so that the choice below rests on coverage and load alone.
	scfg := scheduler.Default()
	scfg.Jitter = 0
	scfg.RefThroughput = 1
	sched, err := scheduler.New(scfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := clusterKey(t)
	n := len(img.chunks)
	k := n / 2
	a, stall := newStallingNode(t, key, sched, img.chunks[k].Digest)
	b := newNode(t, key, sched, nodeOpts{})
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("A: %v", err)
	}
	// B holds only the second half, so that A, holding all, is the
	// scheduler's first choice for a whole read.
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks[k:]); err != nil {
		t.Fatalf("B: %v", err)
	}
	stall.armed.Store(true)
	originBefore := o.bytes.Load()
	const hedgeDelay = 200 * time.Millisecond
	var readers []*node
	for i := range 3 {
		r := newNode(t, key, sched, nodeOpts{cfg: func(c *NodeConfig) { c.HedgeDelay = hedgeDelay }})
		readers = append(readers, r)
		start := time.Now()
		err := readAll(ctx, r.Node, o.ref(), img.blob, img.chunks)
		took := time.Since(start)
		s := r.Stats()
		t.Logf("measured: reader %d: read of %d chunks ok=%v in %v; hedges %d, slow-peer cutoffs %d, duplicate bytes %d, from peers %d B, from origin %d B",
			i, n, err == nil, took.Round(time.Millisecond), s.Hedges, s.SlowPeers, s.DuplicateBytes, s.PeerBytes, s.OriginBytes)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		if s.SlowPeers != 0 {
			t.Errorf("reader %d: %d slow-peer cutoffs, want 0 (the hedge should have won)", i, s.SlowPeers)
		}
	}
	t.Logf("measured: %d reads, 0 failed, 0 bad bytes (every chunk verified), A stalled %d requests, origin sent %d B meanwhile",
		len(readers), stall.stalls.Load(), o.bytes.Load()-originBefore)
	if stall.stalls.Load() == 0 {
		t.Fatal("A never stalled: the test did not test a stall")
	}
	first := readers[0]
	if s := first.Stats(); s.Hedges == 0 {
		t.Errorf("reader 0 sent no hedge")
	}
	// The cancelled request reports after the read has its chunks.
	rafstest.Eventually(t, 20*time.Second, "reader 0 to report the stalled parent", func() bool {
		_, _, rs := first.router.snapshot()
		_, failed, _ := reportsAbout(rs)
		return failed > 0
	})
	if got := o.bytes.Load() - originBefore; got != 0 {
		t.Errorf("origin sent %d bytes, want 0: B held what A stalled on", got)
	}
}

// A parent that stalls mid-stream and is the only holder: the hedge finds
// nobody else, the request is cut off at ParentTimeout, the parent is
// reported and avoided for a while, and the rest comes from the origin.
func TestStalledOnlyHolderCutOff(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	sched, key := newScheduler(t), clusterKey(t)
	n := len(img.chunks)
	k := n / 2
	a, stall := newStallingNode(t, key, sched, img.chunks[k].Digest)
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("A: %v", err)
	}
	stall.armed.Store(true)
	const parentTimeout = 1500 * time.Millisecond
	c := newNode(t, key, sched, nodeOpts{cfg: func(c *NodeConfig) {
		c.HedgeDelay = 300 * time.Millisecond
		c.ParentTimeout = parentTimeout
	}})
	originBefore := o.bytes.Load()
	start := time.Now()
	err := readAll(ctx, c.Node, o.ref(), img.blob, img.chunks)
	took := time.Since(start)
	s := c.Stats()
	t.Logf("measured: read of %d chunks ok=%v in %v (parent_timeout %v); hedges %d, slow-peer cutoffs %d; from peers %d B, from origin %d B",
		n, err == nil, took.Round(time.Millisecond), parentTimeout, s.Hedges, s.SlowPeers, s.PeerBytes, s.OriginBytes)
	if err != nil {
		t.Fatal(err)
	}
	if stall.stalls.Load() == 0 {
		t.Fatal("A never stalled")
	}
	if s.SlowPeers != 1 {
		t.Errorf("slow-peer cutoffs %d, want 1", s.SlowPeers)
	}
	if !c.eng.Skips(a.h.ID()) || c.eng.Avoided(a.h.ID()) { // avoided as slow, not as a liar
		t.Error("C still asks A")
	}
	if got, want := o.bytes.Load()-originBefore, storedBytes(img.chunks[k:]); got != want {
		t.Errorf("origin sent %d bytes, want %d (what A stalled on and after)", got, want)
	}
	if got, want := s.PeerBytes, storedBytes(img.chunks[:k]); got != want {
		t.Errorf("peers sent %d bytes, want %d (what A sent before it stalled)", got, want)
	}
	_, _, rs := c.router.snapshot()
	if _, failed, _ := reportsAbout(rs); failed == 0 {
		t.Errorf("reports %+v: none says A failed", rs)
	}
	// A later read of chunks A holds goes around it at once.
	c2 := slices.Clone(img.chunks[:1])
	if err := c.cache.Remove(cache.KeyOf(c2[0])); err != nil {
		t.Fatal(err)
	}
	before := a.srv.Stats().Streams
	if err := readAll(ctx, c.Node, o.ref(), img.blob, c2); err != nil {
		t.Fatalf("read again: %v", err)
	}
	if got := a.srv.Stats().Streams - before; got != 0 {
		t.Errorf("C sent A %d requests while avoiding it, want 0", got)
	}
}
