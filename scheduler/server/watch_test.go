package server

import (
	"testing"
	"time"

	dhost "damselfly/peer/host"
	"damselfly/rafs/rafstest"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// routeWaitResult is a RouteWait's answer and how long it took.
type routeWaitResult struct {
	ans  scheduler.Answer
	took time.Duration
	err  error
}

// startRouteWait sends a RouteWait from h in the background.
func startRouteWait(t *testing.T, h *dhost.Host, s *Server, req *wire.RouteWait) <-chan routeWaitResult {
	t.Helper()
	out := make(chan routeWaitResult, 1)
	go func() {
		start := time.Now()
		resp, err := tryRequest(t.Context(), h, s.AddrInfo(), req)
		r := routeWaitResult{took: time.Since(start), err: err}
		if a, ok := resp.(*wire.Answer); ok {
			r.ans = a.Answer
		} else if err == nil {
			r.err = errUnexpected{resp}
		}
		out <- r
	}()
	return out
}

// holdingServer starts a server whose waits are long enough (8 s) for a
// held route to be answered by an event, not its timeout, and registers
// two peers, a (with its address, to be named as a parent) and b.
func holdingServer(t *testing.T) (s *Server, a, b *dhost.Host) {
	t.Helper()
	cfg := testConfig(t)
	cfg.State.WaitRetry = 8 * time.Second
	cfg.StreamTimeout = 20 * time.Second
	s = startServer(t, cfg)
	a, b = newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{Addrs: []string{a.Addrs()[0].String()}}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	return s, a, b
}

type errUnexpected struct{ m wire.Message }

func (e errUnexpected) Error() string { return "unexpected response " + e.m.Type().String() }

// TestRouteWaitHeldUntilAnnounced: a route whose answer is all waits is
// held, and answered with the new holder as soon as the chunk's origin
// fetcher announces it, long before the wait's RetryAfter; a RouteWait
// with something to do now is answered at once.
func TestRouteWaitHeldUntilAnnounced(t *testing.T) {
	t.Parallel()
	s, a, b := holdingServer(t)

	// a gets the origin turn for chunk 0, so b would wait for it.
	resp := request(t, a, s, &wire.RouteWait{Blob: blobA, Chunks: []uint32{0}, MaxWait: 8 * time.Second})
	if ans := resp.(*wire.Answer).Answer; !equal(ans.Origin, []uint32{0}) {
		t.Fatalf("a's route: got %+v, want its origin turn for chunk 0", ans)
	}
	held := startRouteWait(t, b, s, &wire.RouteWait{Blob: blobA, Chunks: []uint32{0}, MaxWait: 8 * time.Second})
	rafstest.Eventually(t, 20*time.Second, "b's route to be held", func() bool { return s.HeldRoutes() == 1 })
	// An announcement of another chunk does not answer it.
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{5}}))
	select {
	case r := <-held:
		t.Fatalf("b's route answered after an unrelated announcement: %+v, %v", r.ans, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	announced := time.Now()
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0}}))
	r := <-held
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.ans.Parents) != 1 || r.ans.Parents[0].ID != a.ID().String() || !equal(r.ans.Parents[0].Chunks, []uint32{0}) {
		t.Fatalf("b's held route: got %+v, want a as the parent of chunk 0", r.ans)
	}
	if after := time.Since(announced); after > 4*time.Second {
		t.Errorf("b's route was answered %v after the announcement, want well before the 8 s retry", after)
	}
	t.Logf("held route answered %v after the announcement (%v in all)", time.Since(announced).Round(time.Millisecond), r.took.Round(time.Millisecond))
	if left := s.HeldRoutes(); left != 0 {
		t.Errorf("%d watches left, want 0", left)
	}
}

// TestRouteWaitTimesOutAndAbandon: a held route is answered afresh at its
// MaxWait when nothing happens, and at once when the origin fetcher gives
// its turn up (the waiter gets the turn).
func TestRouteWaitTimesOutAndAbandon(t *testing.T) {
	t.Parallel()
	s, a, b := holdingServer(t)
	request(t, a, s, &wire.Route{Blob: blobA, Chunks: []uint32{3}}) // a's turn

	r := <-startRouteWait(t, b, s, &wire.RouteWait{Blob: blobA, Chunks: []uint32{3}, MaxWait: 300 * time.Millisecond})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.ans.Wait) != 1 || len(r.ans.Parents)+len(r.ans.Origin) != 0 {
		t.Fatalf("timed-out route: got %+v, want a wait", r.ans)
	}
	if r.took < 300*time.Millisecond || r.took > 4*time.Second {
		t.Errorf("timed-out route took %v, want about its 300 ms max wait", r.took)
	}

	wantWokenBy(t, s, a, b, &wire.Abandon{Blob: blobA, Chunks: []uint32{3}})
}

// wantWokenBy holds a RouteWait of b's for chunk 3 of blobA, whose origin
// turn a has, sends m from a, and wants the route answered at once with
// b's turn.
func wantWokenBy(t *testing.T, s *Server, a, b *dhost.Host, m wire.Message) {
	t.Helper()
	held := startRouteWait(t, b, s, &wire.RouteWait{Blob: blobA, Chunks: []uint32{3}, MaxWait: 8 * time.Second})
	rafstest.Eventually(t, 20*time.Second, "b's route to be held", func() bool { return s.HeldRoutes() == 1 })
	wantOK(t, request(t, a, s, m))
	r := <-held
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !equal(r.ans.Origin, []uint32{3}) {
		t.Fatalf("route held over a's %s: got %+v, want b's origin turn for chunk 3", m.Type(), r.ans)
	}
	if r.took > 4*time.Second {
		t.Errorf("route held over a's %s took %v, want well under its 8 s max wait", m.Type(), r.took)
	}
}

// TestRouteWaitFreesStreamSlot: a held route does not count against the
// peer's stream limit, so its other requests go on.
func TestRouteWaitFreesStreamSlot(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MaxStreamsPerPeer = 1
	cfg.State.WaitRetry = 8 * time.Second
	cfg.StreamTimeout = 20 * time.Second
	s := startServer(t, cfg)
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	request(t, a, s, &wire.Route{Blob: blobA, Chunks: []uint32{1}})
	// The server releases a stream's slot just after it answers: wait for
	// b's Register to be released, or its next stream could be refused.
	released := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.perPeer[b.ID()] == 0
	}
	rafstest.Eventually(t, 20*time.Second, "b's register stream to be released", released)
	held := startRouteWait(t, b, s, &wire.RouteWait{Blob: blobA, Chunks: []uint32{1}, MaxWait: 8 * time.Second})
	rafstest.Eventually(t, 20*time.Second, "b's route to be held", func() bool { return s.HeldRoutes() == 1 })
	rafstest.Eventually(t, 20*time.Second, "the held route to give back its slot", released)
	wantOK(t, request(t, b, s, &wire.Heartbeat{}))
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{1}}))
	if r := <-held; r.err != nil || len(r.ans.Parents) != 1 {
		t.Fatalf("held route: got %+v, %v; want a as parent", r.ans, r.err)
	}
}

// TestUndeliveredTurnsGivenBack: a held route whose peer went away (its
// read was given up) and that is then answered with origin turns gives
// the turns back when the answer cannot be sent, so that the next peer
// asking gets them at once instead of waiting for origin_timeout.
func TestUndeliveredTurnsGivenBack(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.State.OriginFetchers = 1
	cfg.State.OriginTimeout = time.Minute
	cfg.State.WaitRetry = 8 * time.Second
	cfg.StreamTimeout = 20 * time.Second
	s := startServer(t, cfg)
	a, b, c := newPeer(t), newPeer(t), newPeer(t)
	for _, h := range []*dhost.Host{a, b, c} {
		wantOK(t, request(t, h, s, &wire.Register{}))
	}
	request(t, a, s, &wire.Route{Blob: blobA, Chunks: []uint32{3}}) // a's turn

	// b's route is held, and b goes away.
	st := openStream(t, b, s)
	if err := wire.WriteFrame(st, &wire.RouteWait{Blob: blobA, Chunks: []uint32{3}, MaxWait: 8 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseWrite()
	rafstest.Eventually(t, 20*time.Second, "b's route to be held", func() bool { return s.HeldRoutes() == 1 })
	_ = st.Reset()
	// A round trip on a new stream of the same connection: the server has
	// read the reset, sent before it, when this is answered.
	wantOK(t, request(t, b, s, &wire.Heartbeat{}))

	// a gives its turn up: the held route is answered with b's turn,
	// which cannot reach b.
	wantOK(t, request(t, a, s, &wire.Abandon{Blob: blobA, Chunks: []uint32{3}}))
	rafstest.Eventually(t, 20*time.Second, "b's route to end", func() bool { return s.HeldRoutes() == 0 })
	var ans scheduler.Answer
	rafstest.Eventually(t, 20*time.Second, "c to get the turn", func() bool {
		ans = request(t, c, s, &wire.Route{Blob: blobA, Chunks: []uint32{3}}).(*wire.Answer).Answer
		return equal(ans.Origin, []uint32{3})
	})
}

// TestRouteWaitWokenByFetcherDrop: a fetcher whose drop of a chunk comes
// in place of its announcement (it fetched the chunk and lost it before
// either was sent) gives its turn up: the held route is answered at
// once, with the turn.
func TestRouteWaitWokenByFetcherDrop(t *testing.T) {
	t.Parallel()
	s, a, b := holdingServer(t)
	request(t, a, s, &wire.Route{Blob: blobA, Chunks: []uint32{3}}) // a's turn
	wantWokenBy(t, s, a, b, &wire.Drop{Blob: blobA, Chunks: []uint32{3}})
}
