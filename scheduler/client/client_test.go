package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/route"
	"damselfly/scheduler"
	"damselfly/scheduler/server"
	"damselfly/scheduler/wire"
)

var blob1 = rafs.Digest{0xb1}

// route asks until the answer names a parent (announcements are
// delivered in the background).
func routeToParent(t *testing.T, c *Client, blob rafs.Digest, chunks []uint32) route.Route {
	t.Helper()
	var rt route.Route
	rafstest.Eventually(t, 20*time.Second, "a route naming a parent", func() bool {
		var err error
		rt, err = c.Route(t.Context(), blob, chunks, 0)
		if err != nil {
			t.Logf("route: %v", err)
			return false
		}
		return len(rt.Parents) > 0
	})
	return rt
}

// TestAnnounceRoute: a announces through its client, b's client routes
// to a, with a's addresses; b reports on a and a drops a chunk.
func TestAnnounceRoute(t *testing.T) {
	t.Parallel()
	s := startScheduler(t)
	ha, hb := newPeer(t), newPeer(t)
	cfgA := testClientConfig(s)
	cfgA.Labels = map[string]string{scheduler.LabelZone: "z1"}
	a := startClient(t, ha, cfgA)
	b := startClient(t, hb, testClientConfig(s))
	a.SetLoad(func() scheduler.Load { return scheduler.Load{ActiveUploads: 1} })

	a.Announce(blob1, []uint32{2, 0, 1})
	rt := routeToParent(t, b, blob1, []uint32{1, 0, 3, 3})
	if len(rt.Parents) != 1 || rt.Parents[0].Info.ID != ha.ID() || !slices.Equal(rt.Parents[0].Chunks, []uint32{0, 1}) {
		t.Fatalf("got parents %+v, want %s with [0 1]", rt.Parents, ha.ID())
	}
	if len(rt.Parents[0].Info.Addrs) == 0 || !rt.Parents[0].Info.Addrs[0].Equal(ha.Addrs()[0]) {
		t.Errorf("parent addrs: got %v, want %v", rt.Parents[0].Info.Addrs, ha.Addrs())
	}
	if !slices.Equal(rt.Origin, []uint32{3}) {
		t.Errorf("origin: got %v, want [3]", rt.Origin)
	}
	b.Abandon(blob1, []uint32{3})
	b.Report(ha.ID(), route.Outcome{Blob: blob1, Bytes: 10, Duration: time.Millisecond, OK: true})
	rafstest.Eventually(t, 20*time.Second, "the report to count", func() bool {
		for _, v := range s.srv.State().Peers(time.Now()) {
			if v.ID == ha.ID().String() && v.Reports == 1 {
				return true
			}
		}
		return false
	})

	a.Drop(blob1, []uint32{0})
	rafstest.Eventually(t, 20*time.Second, "the drop to arrive", func() bool {
		_, n := s.held(ha.ID().String())
		return n == 2
	})
	a.Drop(blob1, []uint32{1, 2})
	rafstest.Eventually(t, 20*time.Second, "the last drop to arrive", func() bool {
		blobs, _ := s.held(ha.ID().String())
		return blobs == 0
	})
}

// TestRestartedScheduler: a scheduler that restarts with empty state gets
// the client's registration and full holdings again.
func TestRestartedScheduler(t *testing.T) {
	t.Parallel()
	s := startScheduler(t)
	ha := newPeer(t)
	a := startClient(t, ha, testClientConfig(s))
	a.Announce(blob1, []uint32{0, 1, 2})
	rafstest.Eventually(t, 20*time.Second, "the announcement", func() bool { _, n := s.held(ha.ID().String()); return n == 3 })

	s.stop()
	s.start()
	rafstest.Eventually(t, 20*time.Second, "re-registration and a full re-announcement", func() bool {
		_, n := s.held(ha.ID().String())
		return n == 3
	})
}

// TestTwoSchedulers: blobs live on the scheduler Pick gives them to;
// when one dies its blobs move to the other, and when it comes back
// (empty) it gets its blobs again.
func TestTwoSchedulers(t *testing.T) {
	t.Parallel()
	s1, s2 := startScheduler(t), startScheduler(t)
	names := []string{s1.name(), s2.name()}
	on1, on2 := blobOwnedBy(t, s1.name(), names), blobOwnedBy(t, s2.name(), names)
	ha, hb := newPeer(t), newPeer(t)
	a := startClient(t, ha, testClientConfig(s1, s2))
	b := startClient(t, hb, testClientConfig(s1, s2))
	id := ha.ID().String()

	a.Announce(on1, []uint32{0, 1, 2})
	a.Announce(on2, []uint32{5, 6})
	rafstest.Eventually(t, 20*time.Second, "each blob on its owner", func() bool {
		b1, n1 := s1.held(id)
		b2, n2 := s2.held(id)
		return b1 == 1 && n1 == 3 && b2 == 1 && n2 == 2
	})
	// Membership goes to both.
	rafstest.Eventually(t, 20*time.Second, "b registered with both", func() bool {
		b1, _ := s1.held(hb.ID().String())
		b2, _ := s2.held(hb.ID().String())
		return b1 == 0 && b2 == 0
	})
	routeToParent(t, b, on1, []uint32{0})

	s1.stop()
	stopped := time.Now()
	rafstest.Eventually(t, 20*time.Second, "s1's blob to move to s2", func() bool {
		blobs, n := s2.held(id)
		return blobs == 2 && n == 5
	})
	t.Logf("measured: s1's blob held at s2 %v after s1 stopped", time.Since(stopped).Round(time.Millisecond))
	rt := routeToParent(t, b, on1, []uint32{0, 1})
	if rt.Parents[0].Info.ID != ha.ID() {
		t.Errorf("route via s2: got parent %s, want %s", rt.Parents[0].Info.ID, ha.ID())
	}

	s1.start()
	restarted := time.Now()
	rafstest.Eventually(t, 20*time.Second, "s1 back with its blob, and s2 rid of it", func() bool {
		b1, n1 := s1.held(id)
		b2, n2 := s2.held(id)
		return b1 == 1 && n1 == 3 && b2 == 1 && n2 == 2
	})
	t.Logf("measured: s1's blob back at s1, and gone from s2, %v after s1 restarted", time.Since(restarted).Round(time.Millisecond))
	routeToParent(t, b, on1, []uint32{2})
}

// TestNoScheduler: with every scheduler down, Route fails with
// ErrNoRoute within RouteTimeout, and queued calls do not block.
func TestNoScheduler(t *testing.T) {
	t.Parallel()
	s := startScheduler(t)
	addr := s.addr()
	s.stop()
	ha := newPeer(t)
	cfg := testClientConfig()
	cfg.Schedulers = []string{addr}
	cfg.RouteTimeout = 300 * time.Millisecond
	a := startClient(t, ha, cfg)
	for i := range 2 * cfg.QueueSize {
		a.Announce(blob1, []uint32{uint32(i)})
		a.Report(ha.ID(), route.Outcome{Blob: blob1})
		a.Abandon(blob1, []uint32{1})
	}
	_, err := a.Route(t.Context(), blob1, []uint32{0}, 0)
	if !errors.Is(err, route.ErrNoRoute) {
		t.Fatalf("got %v, want ErrNoRoute", err)
	}
	// Once the scheduler is taken as dead, Route fails at once.
	rafstest.Eventually(t, 20*time.Second, "the scheduler to be taken as dead", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.liveLocked()) == 0
	})
	_, err = a.Route(t.Context(), blob1, []uint32{0}, 0)
	if !errors.Is(err, route.ErrNoRoute) || !strings.Contains(err.Error(), "no live scheduler") {
		t.Fatalf("got %v, want ErrNoRoute: no live scheduler", err)
	}
	// A cancelled context ends Route at once too.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := a.Route(ctx, blob1, []uint32{0}, 0); !errors.Is(err, route.ErrNoRoute) {
		t.Fatalf("cancelled: got %v, want ErrNoRoute", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := Default()
	good.Schedulers = []string{"/ip4/127.0.0.1/tcp/7946/p2p/12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	bad := Default()
	bad.Schedulers = []string{"/ip4/127.0.0.1/tcp/7946", "nonsense"}
	bad.HeartbeatInterval = 0
	bad.DeadAfter = 0
	bad.UploadCapacity = -1
	err := bad.Validate()
	if err == nil {
		t.Fatal("got nil for a bad config")
	}
	for _, want := range []string{"schedulers[0]", "schedulers[1]", "heartbeat_interval", "dead_after", "upload_capacity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "schedulers: none") {
		t.Errorf("empty config: got %v, want it to name schedulers", err)
	}
}

func TestPickOrder(t *testing.T) {
	t.Parallel()
	names := []string{"a", "b", "c", "d"}
	for i := range 20 {
		blob := rafs.Digest{byte(i)}
		order := pickOrder(blob, names)
		if len(order) != 4 || order[0] != scheduler.Pick(blob, names) {
			t.Fatalf("blob %d: got order %v, want the owner %s first", i, order, scheduler.Pick(blob, names))
		}
		// Without the owner, the runner-up owns it.
		if got := scheduler.Pick(blob, slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == order[0] })); got != order[1] {
			t.Fatalf("blob %d: runner-up %s, Pick without the owner gives %s", i, order[1], got)
		}
	}
}

// TestCoalesce: many small announcements and drops reach the scheduler as
// their net effect, and a change too large for one Announce goes as an
// AnnounceFull.
func TestCoalesce(t *testing.T) {
	t.Parallel()
	s := startScheduler(t)
	ha := newPeer(t)
	a := startClient(t, ha, testClientConfig(s))
	id := ha.ID().String()
	for i := range uint32(1000) {
		a.Announce(blob1, []uint32{i})
	}
	for i := uint32(500); i < 1000; i++ {
		a.Drop(blob1, []uint32{i})
	}
	rafstest.Eventually(t, 20*time.Second, "the net effect: 500 chunks", func() bool { _, n := s.held(id); return n == 500 })

	big := make([]uint32, wire.MaxOrdinals+10)
	for i := range big {
		big[i] = uint32(i)
	}
	a.Announce(blob1, big)
	rafstest.Eventually(t, 20*time.Second, "a change larger than one Announce", func() bool { _, n := s.held(id); return n == int64(len(big)) })
}

// A scheduler that answers "rate limited" is busy, not down: the client
// asks it again after a pause instead of failing, and when its route
// budget runs out it does not ask a scheduler that does not own the blob
// (which would answer without the owner's holdings and origin turns),
// nor take the busy one as dead.
func TestRateLimitedScheduler(t *testing.T) {
	t.Parallel()
	t.Run("waited out", func(t *testing.T) {
		t.Parallel()
		s := startSchedulerWith(t, func(c *server.Config) { c.RequestsPerPeer, c.RequestBurstPerPeer = 10, 1 })
		c := startClient(t, newPeer(t), testClientConfig(s))
		rafstest.Eventually(t, 20*time.Second, "registration", func() bool { b, _ := s.held(c.h.ID().String()); return b >= 0 })
		for i := range 5 {
			if _, err := c.Route(t.Context(), blob1, []uint32{uint32(i)}, 0); err != nil {
				t.Fatalf("route %d: %v", i, err)
			}
		}
		// Five routes through a bucket of one refilling every 100 ms:
		// some were refused and sent again.
		if got := refusedRequests(t, s); got == 0 {
			t.Error("the scheduler refused no request: the test tested nothing")
		}
	})
	t.Run("owner busy", func(t *testing.T) {
		t.Parallel()
		busy := startSchedulerWith(t, func(c *server.Config) { c.RequestsPerPeer, c.RequestBurstPerPeer = 0.01, 3 })
		other := startScheduler(t)
		c := startClient(t, newPeer(t), testClientConfig(busy, other))
		id := c.h.ID().String()
		rafstest.Eventually(t, 20*time.Second, "registration with both", func() bool {
			b1, _ := busy.held(id)
			b2, _ := other.held(id)
			return b1 >= 0 && b2 >= 0
		})
		blob := blobOwnedBy(t, busy.name(), []string{busy.name(), other.name()})
		var err error
		for range 5 { // the bucket holds 3, one went to the registration
			if _, err = c.Route(t.Context(), blob, []uint32{0}, 1<<20); err != nil {
				break
			}
		}
		if err == nil || !errors.Is(err, route.ErrNoRoute) || !strings.Contains(err.Error(), "rate limited") {
			t.Fatalf("routes past the busy owner's bucket: got %v, want no route, rate limited", err)
		}
		if n := other.srv.State().Stats().OriginFetches; n != 0 {
			t.Errorf("the scheduler that does not own the blob granted %d origin turns", n)
		}
		// Heartbeats go on past the refusals, and the busy scheduler
		// stays live.
		refused := time.Now()
		rafstest.Eventually(t, 20*time.Second, "heartbeats to the busy scheduler after its refusals", func() bool {
			for _, v := range busy.srv.State().Peers(time.Now()) {
				if v.ID == id && v.LastSeen.After(refused.Add(2*testClientConfig().HeartbeatInterval)) {
					return true
				}
			}
			return false
		})
		c.mu.Lock()
		live := c.liveLocked()
		c.mu.Unlock()
		if !slices.Contains(live, busy.name()) {
			t.Errorf("live schedulers %v: the busy one was taken as dead", live)
		}
	})
}

// refusedRequests is how many requests s answered "rate limited".
func refusedRequests(t *testing.T, s *testScheduler) float64 {
	t.Helper()
	resp, err := http.Get(s.srv.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "damselfly_scheduler_requests_total{") && strings.Contains(line, `result="rate limited"`) {
			f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			n += f
		}
	}
	return n
}
