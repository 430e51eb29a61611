package peer

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/peer/fetch"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/route"
)

func TestPeerServesWhatAnotherRead(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)

	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("A: %v", err)
	}
	if got, want := o.bytes.Load(), storedBytes(img.chunks); got != want {
		t.Fatalf("origin sent %d bytes for A, want %d (each chunk once)", got, want)
	}
	before := o.bytes.Load()
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("B: %v", err)
	}
	if got := o.bytes.Load() - before; got != 0 {
		t.Errorf("origin sent %d bytes for B, want 0", got)
	}
	s := b.Stats()
	if s.PeerBytes != storedBytes(img.chunks) || s.OriginBytes != 0 {
		t.Errorf("B stats %+v: want all %d bytes from peers", s, storedBytes(img.chunks))
	}
	// A third read on B comes from its cache.
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("B again: %v", err)
	}
	if s := b.Stats(); s.CacheChunks != int64(len(img.chunks)) {
		t.Errorf("B cache chunks %d, want %d", s.CacheChunks, len(img.chunks))
	}
	_, _, reports := b.router.snapshot()
	if len(reports) == 0 {
		t.Error("B reported no outcome")
	}
	for _, r := range reports {
		if !r.OK || r.BadBytes {
			t.Errorf("report %+v, want OK", r)
		}
	}
}

func TestOriginDownPeerHolds(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("A: %v", err)
	}
	o.down.Store(true)
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("B with the origin down: %v", err)
	}
}

func TestOriginDownNobodyHolds(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	o.down.Store(true)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{cfg: func(c *NodeConfig) { c.FetchDeadline = 500 * time.Millisecond }})
	err := readAll(testCtx(t), a.Node, o.ref(), img.blob, img.chunks[2:5])
	var ce *chunkapi.ChunkError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *chunkapi.ChunkError", err)
	}
	if ce.Index != 0 || !ce.Transient {
		t.Errorf("got %+v, want index 0, transient", ce)
	}
	if !strings.Contains(ce.Error(), "503") {
		t.Errorf("error %q does not give the origin's answer", ce)
	}
	if s := a.Stats(); s.Failures == 0 {
		t.Error("failure not counted")
	}
}

func TestOriginPermanentErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	o.code.Store(http.StatusNotFound)
	o.down.Store(true)
	st, key := newScheduler(t), clusterKey(t)
	// A deadline no test waits for: only a permanent error ends this read.
	a := newNode(t, key, st, nodeOpts{cfg: func(c *NodeConfig) { c.FetchDeadline = time.Hour }})
	err := readAll(testCtx(t), a.Node, o.ref(), img.blob, img.chunks[:3])
	var ce *chunkapi.ChunkError
	if !errors.As(err, &ce) || ce.Index != 0 || ce.Transient {
		t.Fatalf("got %v, want a permanent ChunkError for chunk 0", err)
	}
}

func TestRouterDownRecentParentsThenOrigin(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	n := len(img.chunks)
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks[:3*n/4]); err != nil {
		t.Fatalf("A: %v", err)
	}
	// B learns from the scheduler that A holds chunks of the blob.
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks[:n/4]); err != nil {
		t.Fatalf("B: %v", err)
	}
	// Every origin request so far had a turn from the scheduler.
	if a, b := a.Stats(), b.Stats(); a.UnscheduledOrigin != 0 || b.UnscheduledOrigin != 0 || a.OriginRequests == 0 {
		t.Fatalf("with the router up: A made %d origin requests, %d unscheduled; B %d unscheduled", a.OriginRequests, a.UnscheduledOrigin, b.UnscheduledOrigin)
	}
	b.router.down.Store(true)
	before, peerBefore := o.bytes.Load(), b.Stats().PeerBytes
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks[n/4:]); err != nil {
		t.Fatalf("B with the router down: %v", err)
	}
	if st := b.Stats(); st.UnscheduledOrigin == 0 {
		t.Errorf("B went to the origin without a router and counted no unscheduled request: %+v", st)
	}
	if got, want := o.bytes.Load()-before, storedBytes(img.chunks[3*n/4:]); got != want {
		t.Errorf("origin sent %d bytes, want %d (only what A does not hold)", got, want)
	}
	if got, want := b.Stats().PeerBytes-peerBefore, storedBytes(img.chunks[n/4:3*n/4]); got != want {
		t.Errorf("peers sent %d bytes, want %d", got, want)
	}
}

// With the Router down, a blob this node never routed has no recent
// parents of its own; the peer that served it another blob is asked
// first, and the origin only for what that peer lacks.
func TestRouterDownParentsOfOtherBlobs(t *testing.T) {
	t.Parallel()
	one, two := buildImage(t), buildImageSeed(t, 1)
	if one.blob == two.blob {
		t.Fatal("the two images share their blob")
	}
	o1, o2 := newOrigin(t, one.dir), newOrigin(t, two.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o1.ref(), one.blob, one.chunks); err != nil {
		t.Fatalf("A, blob one: %v", err)
	}
	if err := readAll(ctx, a.Node, o2.ref(), two.blob, two.chunks); err != nil {
		t.Fatalf("A, blob two: %v", err)
	}
	// B learns A from the scheduler for blob one only.
	if err := readAll(ctx, b.Node, o1.ref(), one.blob, one.chunks[:2]); err != nil {
		t.Fatalf("B, blob one: %v", err)
	}
	b.router.down.Store(true)
	before, peerBefore := o2.bytes.Load(), b.Stats().PeerBytes
	if err := readAll(ctx, b.Node, o2.ref(), two.blob, two.chunks); err != nil {
		t.Fatalf("B, blob two, router down: %v", err)
	}
	if got := o2.bytes.Load() - before; got != 0 {
		t.Errorf("origin sent B %d bytes of blob two, want 0: A holds it all", got)
	}
	if got, want := b.Stats().PeerBytes-peerBefore, storedBytes(two.chunks); got != want {
		t.Errorf("peers sent B %d bytes of blob two, want %d", got, want)
	}
}

func TestNoRouter(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	nd, err := NewNode(testConfig(), a.h, a.cache, nil, httpOrigin{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if err := readAll(testCtx(t), nd, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
}

// corruptEntry replaces c's entry in cache by one with the same digest and
// sizes and wrong bytes.
func corruptEntry(t *testing.T, cc *cache.Cache, c rafs.Chunk) {
	t.Helper()
	meta, stored, err := cc.Get(cache.KeyOf(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.Remove(cache.KeyOf(c)); err != nil {
		t.Fatal(err)
	}
	stored = slices.Clone(stored)
	for i := range stored {
		stored[i] ^= 0x5a
	}
	if err := cc.Put(cache.KeyOf(c), meta, stored); err != nil {
		t.Fatal(err)
	}
}

func TestBadPeerReportedAndAvoided(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{noVerify: true})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("A: %v", err)
	}
	k := len(img.chunks) / 2
	bad := img.chunks[k]
	corruptEntry(t, a.cache, bad)
	before := o.bytes.Load()
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("B: %v", err)
	}
	if s := b.Stats(); s.BadPeers != 1 {
		t.Errorf("B reported %d bad peers, want 1", s.BadPeers)
	}
	if o.bytes.Load() == before {
		t.Error("the corrupt chunk did not come from the origin")
	}
	_, _, reports := b.router.snapshot()
	found := false
	for _, r := range reports {
		if r.BadBytes && r.BadChunk == bad.Ordinal {
			found = true
		}
	}
	if !found {
		t.Errorf("reports %+v: none accuses chunk %d", reports, bad.Ordinal)
	}
	if !b.eng.Avoided(a.h.ID()) {
		t.Error("B still asks A")
	}
}

// deafRouter records reports but never passes them to the scheduler, as a
// scheduler that lost them (a restart, a full queue) would be: it keeps
// naming the peer the reports were about.
type deafRouter struct{ *router }

func (r deafRouter) Report(_ lpeer.ID, o route.Outcome) {
	r.mu.Lock()
	r.reports = append(r.reports, o)
	r.mu.Unlock()
}

// A peer that sent bad bytes and that the scheduler goes on naming (it
// never heard the report): the reader does not wait for the scheduler to
// change its mind, which could take until FetchDeadline, but takes the
// chunks from the origin at once and asks the bad peer nothing more.
func TestBadPeerNamedAgain(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{noVerify: true})
	b := newNode(t, key, st, nodeOpts{
		router: func(r *router) fetch.Router { return deafRouter{r} },
		// Longer than the reads may take: a reader that waits for the
		// scheduler fails the test.
		cfg: func(c *NodeConfig) { c.FetchDeadline = time.Minute },
	})
	// Each read takes well under a second; waiting on the scheduler's
	// answers took 30 s.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := readAll(ctx, a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("A: %v", err)
	}
	k := len(img.chunks) / 2
	corruptEntry(t, a.cache, img.chunks[k])
	before := o.bytes.Load()
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("B: %v", err)
	}
	if !b.eng.Avoided(a.h.ID()) {
		t.Fatalf("B does not avoid A; B %+v", b.Stats())
	}
	if got := o.bytes.Load() - before; got < storedBytes(img.chunks[k:k+1]) {
		t.Errorf("origin sent %d bytes, want at least the bad chunk's %d", got, storedBytes(img.chunks[k:k+1]))
	}
	// The scheduler still names A for every chunk; B goes around it.
	for _, c := range img.chunks {
		if err := b.cache.Remove(cache.KeyOf(c)); err != nil {
			t.Fatal(err)
		}
	}
	asked := a.srv.Stats().Streams
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("B again: %v", err)
	}
	if got := a.srv.Stats().Streams - asked; got != 0 {
		t.Errorf("B sent A %d requests while avoiding it, want 0", got)
	}
}

func TestConcurrentReadersOneFetch(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := img.chunks
			if i%2 == 1 {
				cs = cs[1:] // a batch that differs but overlaps
			}
			errs <- readAll(ctx, a.Node, o.ref(), img.blob, cs)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got, want := o.bytes.Load(), storedBytes(img.chunks); got != want {
		t.Errorf("origin sent %d bytes, want %d (each chunk once)", got, want)
	}
}

func TestReaderLeavingCancelsOnlyWhenAlone(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	o.down.Store(true)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{cfg: func(c *NodeConfig) { c.FetchDeadline = time.Hour }})
	ctx := testCtx(t)
	// Reader 1 waits for chunk 0 and leaves; reader 2 stays and gets it
	// when the origin comes back.
	short, cancel := contextWithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- readAll(short, a.Node, o.ref(), img.blob, img.chunks[:1]) }()
	rafstest.Eventually(t, 20*time.Second, "reader 1 to ask the origin", func() bool { return o.reqs.Load() > 0 })
	done2 := make(chan error, 1)
	go func() { done2 <- readAll(ctx, a.Node, o.ref(), img.blob, img.chunks[:1]) }()
	rafstest.Eventually(t, 20*time.Second, "reader 2 to join", func() bool { return a.Stats().Collapsed > 0 })
	cancel()
	if err := <-done1; !errors.Is(err, errCanceled) {
		t.Errorf("reader 1: got %v, want cancelled", err)
	}
	o.down.Store(false)
	if err := <-done2; err != nil {
		t.Errorf("reader 2: %v", err)
	}
}

func TestBadRequestChunk(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	cs := slices.Clone(img.chunks[:2])
	cs[1].Size = rafs.MaxChunkSize + 1
	err := readAll(testCtx(t), a.Node, o.ref(), img.blob, cs)
	var ce *chunkapi.ChunkError
	if !errors.As(err, &ce) || ce.Index != 1 || ce.Transient {
		t.Fatalf("got %v, want a permanent ChunkError for chunk 1", err)
	}
}

func TestTwoNodesAtOnceOriginOnce(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	b := newNode(t, key, st, nodeOpts{})
	ctx := testCtx(t)
	errs := make(chan error, 2)
	for _, n := range []*node{a, b} {
		go func() { errs <- readAll(ctx, n.Node, o.ref(), img.blob, img.chunks) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler gives one peer the origin turn; the other waits and
	// then fetches from it.
	if got, want := o.bytes.Load(), storedBytes(img.chunks); got != want {
		t.Errorf("origin sent %d bytes, want %d (each chunk once)", got, want)
	}
}

func TestReadAfterClose(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	a := newNode(t, key, st, nodeOpts{})
	a.stop()
	err := readAll(testCtx(t), a.Node, o.ref(), img.blob, img.chunks[:2])
	if !errors.Is(err, fetch.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
