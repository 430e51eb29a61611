package peer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// flipAlgo is c described with the other digest algorithm, the same 32
// bytes of digest: a read that names a chunk under the wrong algorithm,
// by mistake or to do harm.
func flipAlgo(c rafs.Chunk) rafs.Chunk {
	c.Flags ^= rafs.ChunkBlake3
	return c
}

// readOne reads c alone through n and returns the error.
func readOne(ctx context.Context, n *Node, up registry.Ref, blob rafs.Digest, c rafs.Chunk) error {
	return n.ReadChunks(ctx, up, blob, []rafs.Chunk{c}, func(int, rafs.Chunk, []byte) error { return nil })
}

// wantPermanent fails unless err names chunk 0 as failed for good.
func wantPermanent(t *testing.T, what string, err error) {
	t.Helper()
	var ce *chunkapi.ChunkError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: got %v, want a *chunkapi.ChunkError", what, err)
	}
	if ce.Transient {
		t.Errorf("%s: got a transient error (%v), want a permanent one", what, err)
	}
}

// TestAlgorithmFlipSparesParentAndEntry: a read that names a chunk a
// parent holds with the other digest algorithm (the same 32 bytes of
// digest, the blake3 flag flipped) fails, and harms nobody: the honest
// parent is neither reported (bad bytes, or the chunk missing) nor
// avoided, and keeps its cache entry and its holding; the reader's own
// good entry, read under the flipped description, stays too. Afterwards
// the true chunk is read from the parent as before.
//
// The parent runs both ways: checking what it serves (it would find its
// entry "corrupt" under the flipped description), and not (the daemon's
// default: it would send its honest bytes, which fail the reader's check).
func TestAlgorithmFlipSparesParentAndEntry(t *testing.T) {
	t.Parallel()
	img := buildImageOpts(t, 0, rafs.DigestBlake3, false) // a chunk flips between sha256 and blake3
	for _, noVerify := range []bool{false, true} {
		t.Run(fmt.Sprintf("no_verify=%v", noVerify), func(t *testing.T) {
			t.Parallel()
			testAlgorithmFlip(t, img, noVerify)
		})
	}
}

func testAlgorithmFlip(t *testing.T, img image, noVerify bool) {
	o := newOrigin(t, img.dir)
	sched := newScheduler(t)
	key := clusterKey(t)
	parent := newNode(t, key, sched, nodeOpts{noVerify: noVerify})
	reader := newNode(t, key, sched, nodeOpts{})
	ctx := testCtx(t)
	if err := readAll(ctx, parent.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatalf("parent read: %v", err)
	}
	c := img.chunks[3]
	flipped := flipAlgo(c)

	// The reader asks the parent, which the scheduler names.
	reqs := o.reqs.Load()
	start := time.Now()
	wantPermanent(t, "reader's flipped read", readOne(ctx, reader.Node, o.ref(), img.blob, flipped))
	if took := time.Since(start); took > testConfig().FetchDeadline/2 {
		t.Errorf("the flipped read took %v, want well under FetchDeadline (%v)", took, testConfig().FetchDeadline)
	}
	if got := o.reqs.Load() - reqs; got > 2 {
		t.Errorf("the origin was asked %d times for the flipped chunk, want at most 2", got)
	}
	if s := parent.srv.Stats(); s.ChunksSent != 0 || s.Corrupt != 0 {
		t.Errorf("parent's server: sent %d chunks, found %d corrupt; want 0 and 0 (it holds no such chunk, and its entry is good)", s.ChunksSent, s.Corrupt)
	}
	_, _, reports := reader.router.snapshot()
	for _, r := range reports {
		if r.BadBytes || slices.Contains(r.Missing, c.Ordinal) {
			t.Errorf("the reader reported the honest parent: %+v", r)
		}
	}
	if reader.eng.Skips(parent.h.ID()) {
		t.Error("the reader avoids the honest parent")
	}
	if s := reader.Stats(); s.BadPeers != 0 {
		t.Errorf("BadPeers: got %d, want 0", s.BadPeers)
	}
	if !parent.cache.Has(cache.KeyOf(c)) {
		t.Error("the flipped request deleted the parent's good cache entry")
	}
	if _, dropped, _ := parent.router.snapshot(); slices.Contains(dropped[img.blob], c.Ordinal) {
		t.Error("the parent dropped its holding of the chunk")
	}
	if reader.cache.Has(cache.KeyOf(flipped)) {
		t.Error("the reader cached bytes under the flipped key")
	}

	// The parent itself reads the chunk under the flipped description:
	// its cache holds the true chunk, which must not be judged as the
	// flipped one (and deleted).
	wantPermanent(t, "parent's flipped read", readOne(ctx, parent.Node, o.ref(), img.blob, flipped))
	if !parent.cache.Has(cache.KeyOf(c)) {
		t.Error("the parent's flipped read deleted its good cache entry")
	}

	// The true chunk still comes from the parent.
	before := reader.Stats()
	if err := readAll(ctx, reader.Node, o.ref(), img.blob, []rafs.Chunk{c}); err != nil {
		t.Fatalf("true read after the flipped one: %v", err)
	}
	if after := reader.Stats(); after.PeerChunks != before.PeerChunks+1 {
		t.Errorf("true read: %d chunks from peers, want 1 (the honest parent)", after.PeerChunks-before.PeerChunks)
	}
}

// TestOriginMismatchFailsFast: bytes from the origin that do not verify
// against the read's description (another digest, or the other digest
// algorithm) fail the read at once, as permanent, after one request to
// the origin, not after FetchDeadline of retries.
func TestOriginMismatchFailsFast(t *testing.T) {
	t.Parallel()
	img := buildImageOpts(t, 0, rafs.DigestBlake3, false) // a chunk flips between sha256 and blake3
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
			if n.cache.Has(cache.KeyOf(tt.c)) {
				t.Error("bytes that failed verification were cached")
			}
		})
	}
}

// TestFlightNotSharedAcrossSources: two reads of one chunk at once, one
// whose Upstream names a registry that fails (after holding the request
// until the other read has come), the other the real registry. The read
// with the real registry succeeds: a fetch in flight is shared only by
// reads of the same source, so the bogus one cannot fail it.
func TestFlightNotSharedAcrossSources(t *testing.T) {
	t.Parallel()
	img := buildImageOpts(t, 0, rafs.DigestBlake3, false) // a chunk flips between sha256 and blake3
	o := newOrigin(t, img.dir)
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	bogus := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.Error(w, "denied", http.StatusUnauthorized)
	}))
	t.Cleanup(bogus.Close)
	var released bool
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	n := newNode(t, clusterKey(t), newScheduler(t), nodeOpts{})
	ctx := testCtx(t)
	c := img.chunks[4]

	bad := registry.Ref{Registry: bogus.URL, Repo: "test/image", Authorization: "Bearer stolen"}
	badDone := make(chan error, 1)
	go func() { badDone <- readOne(ctx, n.Node, bad, img.blob, c) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the bogus registry was never asked")
	}
	goodDone := make(chan error, 1)
	go func() { goodDone <- readAll(ctx, n.Node, o.ref(), img.blob, []rafs.Chunk{c}) }()
	// Wait for the good read; if it joins the bogus read's fetch (it
	// then cannot end before that fetch), let the bogus registry answer
	// so that the test ends.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var goodErr error
wait:
	for {
		select {
		case goodErr = <-goodDone:
			break wait
		case <-tick.C:
			if n.Stats().Collapsed > 0 {
				free()
			}
		case <-ctx.Done():
			t.Fatal("the good read did not end")
		}
	}
	if goodErr != nil {
		t.Errorf("the read with the real registry failed: %v", goodErr)
	}
	if got := n.Stats().Collapsed; got != 0 {
		t.Errorf("Collapsed: got %d, want 0: the reads of two sources shared a fetch", got)
	}
	free()
	if err := <-badDone; err == nil {
		t.Error("the read with the bogus registry succeeded")
	}
	if !n.cache.Has(cache.KeyOf(c)) {
		t.Error("the chunk the good read fetched is not cached")
	}
}

// TestFlightNotSharedAcrossDescriptions: two reads of one chunk at once
// with the same source, one describing it at the wrong offset (its
// origin request held until the other read has come). The origin's
// bytes there fail the digest, which fails that read at once and for
// good; the read that describes the chunk right must not share that
// fetch, and succeeds.
func TestFlightNotSharedAcrossDescriptions(t *testing.T) {
	t.Parallel()
	img := buildImageOpts(t, 0, rafs.DigestBlake3, false) // a chunk flips between sha256 and blake3
	serve := newOrigin(t, img.dir)
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	var first sync.Once
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := false
		first.Do(func() { held = true })
		if held {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		serve.serve(w, r)
	}))
	t.Cleanup(o.Close)
	var released bool
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	n := newNode(t, clusterKey(t), newScheduler(t), nodeOpts{})
	ctx := testCtx(t)
	up := registry.Ref{Registry: o.URL, Repo: "test/image"}
	c := img.chunks[4]
	bad := c
	bad.CompressedOffset = img.chunks[5].CompressedOffset // another chunk's bytes

	badDone := make(chan error, 1)
	go func() { badDone <- readOne(ctx, n.Node, up, img.blob, bad) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the origin was never asked")
	}
	goodDone := make(chan error, 1)
	go func() { goodDone <- readAll(ctx, n.Node, up, img.blob, []rafs.Chunk{c}) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var goodErr error
wait:
	for {
		select {
		case goodErr = <-goodDone:
			break wait
		case <-tick.C:
			if n.Stats().Collapsed > 0 {
				free()
			}
		case <-ctx.Done():
			t.Fatal("the good read did not end")
		}
	}
	if goodErr != nil {
		t.Errorf("the read that describes the chunk right failed: %v", goodErr)
	}
	free()
	wantPermanent(t, "the read at the wrong offset", <-badDone)
}
