package peer

import (
	"context"
	"sync"
	"testing"
	"time"

	"damselfly/peer/fetch"
	"damselfly/rafs"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/route"
	"damselfly/scheduler"
)

// announcements is what a scheduler daemon's held routes watch: every
// announcement of any node wakes every held route, which then routes
// again (a coarser watch than the daemon's, with the same effect).
type announcements struct {
	mu sync.Mutex
	ch chan struct{}
}

func (a *announcements) next() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ch == nil {
		a.ch = make(chan struct{})
	}
	return a.ch
}

func (a *announcements) signal() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ch != nil {
		close(a.ch)
		a.ch = nil
	}
}

// heldRouter is the test router with RouteWait.
type heldRouter struct {
	*router
	news *announcements
}

var _ fetch.RouteWaiter = heldRouter{}

func (r heldRouter) Announce(blob rafs.Digest, chunks []uint32) {
	r.router.Announce(blob, chunks)
	r.news.signal()
}

func (r heldRouter) RouteWait(ctx context.Context, blob rafs.Digest, chunks []uint32, bytes uint64, maxWait time.Duration) (route.Route, error) {
	news := r.news.next() // before routing: an announcement in between counts
	rt, err := r.Route(ctx, blob, chunks, bytes)
	if err != nil || len(rt.Parents) > 0 || len(rt.Origin) > 0 {
		return rt, err
	}
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-news:
	case <-t.C:
	case <-ctx.Done():
		return route.Route{}, ctx.Err()
	}
	return r.Route(ctx, blob, chunks, bytes)
}

// TestHeldRouteFetchesAtOnce: a node waiting for another's origin fetch
// fetches the chunks from it as soon as they are announced, not at the
// scheduler's next "ask again" (5 s here).
func TestHeldRouteFetchesAtOnce(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	o.delay.Store(int64(300 * time.Millisecond))
	st := newSchedulerWith(t, func(c *scheduler.Config) { c.WaitRetry = 5 * time.Second })
	key := clusterKey(t)
	news := &announcements{}
	held := nodeOpts{
		router: func(r *router) fetch.Router { return heldRouter{r, news} },
		// MaxRetryDelay bounds a held route's wait too: leave it long.
		cfg: func(c *NodeConfig) { c.MaxRetryDelay = 5 * time.Second },
	}
	a, b := newNode(t, key, st, held), newNode(t, key, st, held)
	ctx := testCtx(t)
	errs := make(chan error, 1)
	go func() { errs <- readAll(ctx, a.Node, o.ref(), img.blob, img.chunks) }()
	rafstest.Eventually(t, 20*time.Second, "a's origin request", func() bool { return o.reqs.Load() > 0 })
	start := time.Now()
	if err := readAll(ctx, b.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if got, want := o.bytes.Load(), storedBytes(img.chunks); got != want {
		t.Errorf("origin sent %d bytes, want %d (each chunk once: b waited for a)", got, want)
	}
	if st := b.Stats(); st.PeerBytes == 0 {
		t.Errorf("b got no bytes from a peer: %+v", st)
	}
	if took > 3*time.Second {
		t.Errorf("b read the image in %v, want well under the 5 s retry", took)
	}
	t.Logf("b read the image %v after a's origin fetch started", took.Round(time.Millisecond))
}
