package client

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	dhost "damselfly/peer/host"
	"damselfly/rafs/rafstest"
	"damselfly/scheduler"
	"damselfly/scheduler/server"
	"damselfly/scheduler/wire"
)

// TestRouteWait: a route that would only wait is answered when the
// chunk's origin fetcher announces it.
func TestRouteWait(t *testing.T) {
	t.Parallel()
	s := startSchedulerWith(t, func(c *server.Config) {
		c.State.WaitRetry = 8 * time.Second
		c.StreamTimeout = 20 * time.Second
	})
	ha, hb := newPeer(t), newPeer(t)
	a := startClient(t, ha, testClientConfig(s))
	b := startClient(t, hb, testClientConfig(s))
	rafstest.Eventually(t, 20*time.Second, "a's origin turn for chunk 4", func() bool {
		rt, err := a.Route(t.Context(), blob1, []uint32{4}, 0)
		return err == nil && len(rt.Origin) == 1
	})
	rafstest.Eventually(t, 20*time.Second, "b to be a member", func() bool {
		return len(s.srv.State().Peers(time.Now())) == 2
	})
	var announced atomic.Int64 // Unix ns
	wasHeld := make(chan bool, 1)
	go func() {
		// Announce once b's route is held (or after 5 s, failing below).
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		held := false
		for start := time.Now(); !held && time.Since(start) < 5*time.Second; <-tick.C {
			held = s.srv.HeldRoutes() == 1
		}
		wasHeld <- held
		announced.Store(time.Now().UnixNano())
		a.Announce(blob1, []uint32{4})
	}()
	r, err := b.RouteWait(t.Context(), blob1, []uint32{4}, 64<<10, 8*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Parents) != 1 || r.Parents[0].Info.ID != ha.ID() {
		t.Fatalf("b's held route: got %+v, want a as the parent", r)
	}
	if !<-wasHeld {
		t.Error("b's route was never held")
	}
	after := time.Since(time.Unix(0, announced.Load()))
	if after > 4*time.Second {
		t.Errorf("b's held route was answered %v after a announced, want well before the scheduler's 8 s retry", after)
	}
	t.Logf("held route answered %v after the announcement", after.Round(time.Millisecond))
}

// oldScheduler serves the one-request protocol only, as a scheduler that
// predates sessions does, answering each request with answer (OK when it
// returns nil).
func oldScheduler(t *testing.T, answer func(wire.Message) wire.Message) *dhost.Host {
	t.Helper()
	h := newPeer(t)
	h.SetStreamHandler(wire.ProtocolID, func(st network.Stream) {
		defer st.Close()
		req, err := wire.ReadFrame(st)
		if err != nil {
			_ = st.Reset()
			return
		}
		resp := answer(req)
		if resp == nil {
			resp = &wire.OK{}
		}
		_ = wire.WriteFrame(st, resp)
	})
	return h
}

// clientOf starts a client whose one scheduler is h, with short
// heartbeats and timeouts.
func clientOf(t *testing.T, h *dhost.Host, routeTimeout time.Duration) *Client {
	t.Helper()
	cfg := Default()
	cfg.Schedulers = []string{fmt.Sprintf("%s/p2p/%s", h.Addrs()[0], h.ID())}
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.RouteTimeout = routeTimeout
	cfg.RequestTimeout = time.Second
	return startClient(t, newPeer(t), cfg)
}

// TestRouteWaitOldScheduler: a scheduler that does not know RouteWait (it
// answers "unknown message type", as a decoder without it does) is asked
// once; after that the client waits and routes on its own.
func TestRouteWaitOldScheduler(t *testing.T) {
	t.Parallel()
	var routes, routeWaits atomic.Int64
	h := oldScheduler(t, func(req wire.Message) wire.Message {
		switch m := req.(type) {
		case *wire.RouteWait:
			routeWaits.Add(1)
			return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("%v: unknown message type %#x", wire.ErrMalformed, uint8(m.Type()))}
		case *wire.Route:
			routes.Add(1)
			return &wire.Answer{Answer: scheduler.Answer{Wait: []scheduler.Wait{{Chunks: m.Chunks, RetryAfter: time.Second}}}}
		}
		return nil
	})
	c := clientOf(t, h, time.Second)
	for i := range 3 {
		start := time.Now()
		r, err := c.RouteWait(t.Context(), blob1, []uint32{7}, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Wait) != 1 {
			t.Fatalf("route %d: got %+v, want a wait", i, r)
		}
		if i > 0 && time.Since(start) < 200*time.Millisecond {
			t.Errorf("route %d came back after %v, want it to wait the 200 ms itself", i, time.Since(start))
		}
	}
	if got := routeWaits.Load(); got != 1 {
		t.Errorf("scheduler got %d RouteWait requests, want 1", got)
	}
	if got := routes.Load(); got != 3 {
		t.Errorf("scheduler got %d Route requests, want 3", got)
	}
}

// TestRouteSizeOldScheduler: a scheduler that predates route sizes (its
// decoder finds 8 bytes after a Route's body) is asked with the size
// once; the client then asks it without, and every route is answered.
func TestRouteSizeOldScheduler(t *testing.T) {
	t.Parallel()
	var sized, unsized atomic.Int64
	h := oldScheduler(t, func(req wire.Message) wire.Message {
		m, ok := req.(*wire.Route)
		switch {
		case !ok:
			return nil
		case m.Bytes != 0:
			sized.Add(1)
			return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("%v: %s: 8 bytes after the body", wire.ErrMalformed, m.Type())}
		default:
			unsized.Add(1)
			return &wire.Answer{Answer: scheduler.Answer{Origin: m.Chunks}}
		}
	})
	c := clientOf(t, h, 2*time.Second)
	for i := range 3 {
		r, err := c.Route(t.Context(), blob1, []uint32{uint32(i)}, 1<<20)
		if err != nil {
			t.Fatalf("route %d: %v", i, err)
		}
		if len(r.Origin) != 1 || r.Origin[0] != uint32(i) {
			t.Fatalf("route %d: got %+v, want its chunk from origin", i, r)
		}
	}
	if got := sized.Load(); got != 1 {
		t.Errorf("scheduler got %d sized routes, want 1", got)
	}
	if got := unsized.Load(); got != 3 {
		t.Errorf("scheduler got %d unsized routes, want 3", got)
	}
}

// sessionServer answers every request on the session protocol with OK
// (a Route with its chunks from origin), counting streams and requests;
// with once, it closes each session after its first answer, as a
// scheduler short of sessions does.
func sessionServer(t *testing.T, once bool) (*dhost.Host, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	h := newPeer(t)
	var streams, requests atomic.Int64
	h.SetStreamHandler(wire.SessionProtocolID, func(st network.Stream) {
		streams.Add(1)
		defer st.Close()
		for {
			req, err := wire.ReadFrame(st)
			if err != nil {
				return
			}
			requests.Add(1)
			var resp wire.Message = &wire.OK{}
			if m, ok := req.(*wire.Route); ok {
				resp = &wire.Answer{Answer: scheduler.Answer{Origin: m.Chunks}}
			}
			if wire.WriteFrame(st, resp) != nil || once {
				return
			}
		}
	})
	return h, &streams, &requests
}

// sessionClient starts a client of a sessionServer (closeAfterOne as
// there) that has registered, with no heartbeat before the test's own
// requests, and returns it with the server's stream and request counts.
func sessionClient(t *testing.T, closeAfterOne bool) (*Client, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	h, streams, requests := sessionServer(t, closeAfterOne)
	cfg := Default()
	cfg.Schedulers = []string{fmt.Sprintf("%s/p2p/%s", h.Addrs()[0], h.ID())}
	cfg.HeartbeatInterval = time.Hour // only the register before the test's requests
	c := startClient(t, newPeer(t), cfg)
	rafstest.Eventually(t, 10*time.Second, "the register", func() bool { return requests.Load() >= 1 })
	return c, streams, requests
}

// TestSessionReused: sequential requests to a scheduler that speaks
// sessions go on one stream.
func TestSessionReused(t *testing.T) {
	t.Parallel()
	c, streams, requests := sessionClient(t, false)
	for i := range 20 {
		r, err := c.Route(t.Context(), blob1, []uint32{uint32(i)}, 0)
		if err != nil || len(r.Origin) != 1 {
			t.Fatalf("route %d: %+v, %v", i, r, err)
		}
	}
	if got := requests.Load(); got < 21 {
		t.Fatalf("scheduler got %d requests, want at least 21", got)
	}
	if got := streams.Load(); got > 2 {
		t.Errorf("21 sequential requests took %d streams, want 1 (2 if the register's was still in use)", got)
	}
}

// TestSessionClosedAfterOne: a scheduler that answers each session once
// and closes it costs no request an error: the kept session found closed
// is dropped, the request goes on a new stream, and no session is kept
// for a while.
func TestSessionClosedAfterOne(t *testing.T) {
	t.Parallel()
	c, streams, requests := sessionClient(t, true)
	for i := range 10 {
		r, err := c.Route(t.Context(), blob1, []uint32{uint32(i)}, 0)
		if err != nil || len(r.Origin) != 1 {
			t.Fatalf("route %d: %+v, %v", i, r, err)
		}
	}
	// The register's session was kept and found closed once at most;
	// after that every request had a stream of its own.
	if s, r := streams.Load(), requests.Load(); s != r || r != 11 {
		t.Errorf("%d streams for %d requests, want 11 for 11", s, r)
	}
}
