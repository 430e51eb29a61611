package server

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	dhost "damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/rafs/rafstest"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

var blobA = rafs.Digest{0xaa, 1}

// TestRoundTrips registers two peers, announces chunks from one and
// routes the other to it.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	a, b := newPeer(t), newPeer(t)

	wantCode(t, request(t, a, s, &wire.Heartbeat{}), wire.CodeUnknownPeer)
	aAddrs := []string{a.Addrs()[0].String()}
	wantOK(t, request(t, a, s, &wire.Register{Addrs: aAddrs, Labels: map[string]string{"zone": "z1"}, UploadCapacity: 1 << 20}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	wantOK(t, request(t, a, s, &wire.Heartbeat{Load: scheduler.Load{ActiveUploads: 1}}))
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0, 1, 2}}))
	wantOK(t, request(t, a, s, &wire.AnnounceFull{Blob: blobA, Held: scheduler.BitsetOf(0, 1, 2, 3)}))
	wantOK(t, request(t, a, s, &wire.Drop{Blob: blobA, Chunks: []uint32{3}}))

	resp := request(t, b, s, &wire.Route{Blob: blobA, Chunks: []uint32{1, 2, 3}})
	ans, ok := resp.(*wire.Answer)
	if !ok {
		t.Fatalf("route: got %#v, want an answer", resp)
	}
	got := ans.Answer
	if len(got.Parents) != 1 || got.Parents[0].ID != a.ID().String() || !equal(got.Parents[0].Chunks, []uint32{1, 2}) {
		t.Fatalf("route: got parents %+v, want %s with chunks [1 2]", got.Parents, a.ID())
	}
	if !equal(got.Parents[0].Addrs, aAddrs) {
		t.Errorf("parent addrs: got %v, want %v", got.Parents[0].Addrs, aAddrs)
	}
	if !equal(got.Origin, []uint32{3}) {
		t.Errorf("origin: got %v, want [3] (b's turn)", got.Origin)
	}
	wantOK(t, request(t, b, s, &wire.Abandon{Blob: blobA, Chunks: []uint32{3}}))

	// b reports on its assignment to a.
	ok2 := wantOK(t, request(t, b, s, &wire.Report{About: a.ID().String(), Outcome: scheduler.Outcome{Blob: blobA, Bytes: 100, Duration: time.Millisecond, OK: true}}))
	if ok2.Banned {
		t.Error("report: got banned, want not")
	}
	// The same assignment cannot be reported twice.
	wantCode(t, request(t, b, s, &wire.Report{About: a.ID().String(), Outcome: scheduler.Outcome{Blob: blobA, OK: true}}), wire.CodeBadRequest)

	wantOK(t, request(t, a, s, &wire.Unregister{}))
	wantCode(t, request(t, a, s, &wire.Heartbeat{}), wire.CodeUnknownPeer)
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestActsForItself checks that every request acts for the stream's
// authenticated peer: b cannot announce, heartbeat or report as a.
func TestActsForItself(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))

	// b is not registered, whatever a did.
	wantCode(t, request(t, b, s, &wire.Heartbeat{}), wire.CodeUnknownPeer)
	wantCode(t, request(t, b, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0}}), wire.CodeUnknownPeer)
	wantCode(t, request(t, b, s, &wire.Route{Blob: blobA, Chunks: []uint32{0}}), wire.CodeUnknownPeer)

	// a reporting itself is refused.
	wantCode(t, request(t, a, s, &wire.Report{About: a.ID().String(), Outcome: scheduler.Outcome{Blob: blobA, OK: true}}), wire.CodeBadRequest)

	// What a announces is a's: a route from b names a, and a route from a
	// never names a.
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0}}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	ans := request(t, a, s, &wire.Route{Blob: blobA, Chunks: []uint32{0}}).(*wire.Answer)
	if len(ans.Answer.Parents) != 0 {
		t.Errorf("a's route names parents %+v, want none", ans.Answer.Parents)
	}
	views := s.State().Peers(time.Now())
	for _, v := range views {
		if v.ID == b.ID().String() && v.Chunks != 0 {
			t.Errorf("b holds %d chunks, want 0", v.Chunks)
		}
	}
}

// TestExpiry checks that a peer that stops heartbeating is dropped with
// its holdings after the TTL.
func TestExpiry(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.State.PeerTTL = time.Second
	s := startServer(t, cfg)
	a := newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	// On a loaded machine the TTL may run out before the announcement
	// arrives; either way the peer must end up dropped.
	if resp := request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0, 1}}); resp.Type() == wire.TypeOK {
		if n := len(s.State().Blobs()); n > 1 {
			t.Fatalf("got %d blobs, want at most 1", n)
		}
	}
	rafstest.Eventually(t, 20*time.Second, "the silent peer to expire", func() bool {
		return len(s.State().Peers(time.Now())) == 0 && len(s.State().Blobs()) == 0
	})
	wantCode(t, request(t, a, s, &wire.Heartbeat{}), wire.CodeUnknownPeer)
}

// TestMalformed sends frames that break the protocol.
func TestMalformed(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	a := newPeer(t)
	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"unknown type", []byte{0, 0, 0, 1, 0x7f}},
		{"truncated body", []byte{0, 0, 0, 3, byte(wire.TypeAnnounce), 1, 2}},
		{"oversized", binary.BigEndian.AppendUint32(nil, wire.MaxFrame+1)},
		{"response as request", []byte{0, 0, 0, 2, byte(wire.TypeOK), 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawRequest(t, a, s, tt.frame)
			wantCode(t, resp, wire.CodeBadRequest)
		})
	}
}

// TestStreamLimit checks that a peer over MaxStreamsPerPeer is refused.
func TestStreamLimit(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MaxStreamsPerPeer = 1
	s := startServer(t, cfg)
	a := newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	// The server releases the register's stream after the answer is
	// out: counted now, it would pass for the held one below.
	rafstest.Eventually(t, 20*time.Second, "the register's stream to be released", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.perPeer[a.ID()] == 0
	})
	// Hold one stream open with half a request (a stream is negotiated
	// when first written to)...
	st := openStream(t, a, s)
	defer st.Reset()
	if _, err := st.Write([]byte{0, 0}); err != nil {
		t.Fatal(err)
	}
	rafstest.Eventually(t, 20*time.Second, "the held stream to be counted", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.perPeer[a.ID()] == 1
	})
	// ...and the next is refused.
	wantCode(t, request(t, a, s, &wire.Heartbeat{}), wire.CodeRateLimited)
}

// TestRequestRateLimit checks that a peer over RequestsPerPeer is refused
// "too many requests" once its burst is spent, except for heartbeats,
// that other peers are not, and that a refilled bucket is forgotten.
func TestRequestRateLimit(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.RequestsPerPeer = 0.5 // a token every 2 s: none refill while the burst goes
	cfg.RequestBurstPerPeer = 3
	s := startServer(t, cfg)
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0}}))
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{1}}))
	refused := false
	for range 10 {
		resp := request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{2}})
		if e, ok := resp.(*wire.Error); ok {
			if e.Code != wire.CodeRateLimited || e.Message != "too many requests" {
				t.Fatalf("got %#v, want rate limited: too many requests", resp)
			}
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("11 requests in a row passed a bucket of 3 refilling every 2 s")
	}
	// Heartbeats pass an empty bucket; other peers have their own.
	wantOK(t, request(t, a, s, &wire.Heartbeat{}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	has := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.limiters[a.ID()] != nil
	}
	s.sweepLimiters(time.Now())
	if !has() {
		t.Fatal("the bucket of a peer that just spent it was forgotten")
	}
	s.sweepLimiters(time.Now().Add(time.Minute))
	if has() {
		t.Fatal("a refilled bucket was kept")
	}
}

// TestAdminAPI exercises every admin endpoint.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{Labels: map[string]string{"zone": "z"}}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0}}))
	// b is told to fetch chunk 1 from origin: an origin fetch in flight.
	request(t, b, s, &wire.Route{Blob: blobA, Chunks: []uint32{1}})

	get := func(path string, want int) string {
		t.Helper()
		return do(t, http.MethodGet, s.AdminURL()+path, want)
	}
	if got := get("/healthz", 200); strings.TrimSpace(got) != "ok" {
		t.Errorf("healthz: got %q, want ok", got)
	}
	var peers []PeerJSON
	decode(t, get("/api/v1/peers", 200), &peers)
	if len(peers) != 2 || !strings.Contains(get("/api/v1/peers", 200), `"upload_capacity"`) {
		t.Errorf("peers: got %+v, want 2 with snake_case keys", peers)
	}
	var blobs []BlobJSON
	decode(t, get("/api/v1/blobs", 200), &blobs)
	if len(blobs) != 1 || blobs[0].Blob != blobA.String() || blobs[0].Holders != 1 {
		t.Errorf("blobs: got %+v, want %s held by 1", blobs, blobA)
	}
	var origin []OriginJSON
	decode(t, get("/api/v1/origin", 200), &origin)
	if len(origin) != 1 || origin[0].Chunk != 1 || len(origin[0].Fetchers) != 1 || origin[0].Fetchers[0].Peer != b.ID().String() {
		t.Errorf("origin: got %+v, want chunk 1 fetched by %s", origin, b.ID())
	}

	do(t, http.MethodPost, s.AdminURL()+"/api/v1/bans/"+a.ID().String(), 200)
	var bans []BanJSON
	decode(t, get("/api/v1/bans", 200), &bans)
	if len(bans) != 1 || bans[0].Peer != a.ID().String() {
		t.Errorf("bans: got %+v, want %s", bans, a.ID())
	}
	wantCode(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{2}}), wire.CodeBanned)
	do(t, http.MethodDelete, s.AdminURL()+"/api/v1/bans/"+a.ID().String(), 200)
	decode(t, get("/api/v1/bans", 200), &bans)
	if len(bans) != 0 {
		t.Errorf("bans after unban: got %+v, want none", bans)
	}
	do(t, http.MethodPost, s.AdminURL()+"/api/v1/bans/not-a-peer", 400)
	get("/api/v1/nothing", 404)

	metrics := get("/metrics", 200)
	for _, want := range []string{
		"damselfly_scheduler_peers 2",
		"damselfly_scheduler_blobs 1",
		`damselfly_scheduler_requests_total{result="ok",type="register"} 2`,
		`damselfly_scheduler_route_chunks_total{outcome="origin"} 1`,
		"damselfly_scheduler_route_seconds_count 1",
		"damselfly_scheduler_bans 0",
		"damselfly_scheduler_origin_fetches 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics: no %q", want)
		}
	}
}

func do(t *testing.T, method, url string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: got status %d, want %d; body %s", method, url, resp.StatusCode, want, body)
	}
	return string(body)
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
}

// TestReportBans: a bad-bytes report that reaches the quorum is answered
// with the banned flag, and the banned peer may no longer announce.
func TestReportBans(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.State.BanQuorum = 1
	s := startServer(t, cfg)
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	wantOK(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0}}))
	ans := request(t, b, s, &wire.Route{Blob: blobA, Chunks: []uint32{0}}).(*wire.Answer)
	if len(ans.Answer.Parents) != 1 {
		t.Fatalf("got parents %+v, want a", ans.Answer.Parents)
	}
	ok := wantOK(t, request(t, b, s, &wire.Report{About: a.ID().String(), Outcome: scheduler.Outcome{Blob: blobA, BadBytes: true, BadChunk: 0}}))
	if !ok.Banned {
		t.Error("report: got not banned, want banned (quorum 1)")
	}
	wantCode(t, request(t, a, s, &wire.Announce{Blob: blobA, Chunks: []uint32{1}}), wire.CodeBanned)
}

// The admin API drops a client that never finishes its headers
// (slowloris) and refuses oversized headers.
func TestAdminSlowAndBigHeaders(t *testing.T) {
	t.Parallel()
	s := startServer(t, testConfig(t))
	addr := strings.TrimPrefix(s.AdminURL(), "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := conn.Write([]byte("GET /api/v1/peers HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// The server must close the connection (after its 5 s header
	// timeout); the test's own deadline only bounds one that never does.
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatal("the admin API kept a connection with unfinished headers open")
	}
	t.Logf("measured: unfinished headers cut off after %v", time.Since(start).Round(100*time.Millisecond))

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.AdminURL()+"/api/v1/peers", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("b", 128<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("128 KiB header: got %d, want %d", resp.StatusCode, http.StatusRequestHeaderFieldsTooLarge)
	}
}

// TestReportSybil: two peer IDs on one machine (here, both on loopback)
// are one machine to the ban quorum, however many IDs it runs: their
// accusations of an honest parent do not ban it. The machine is the
// connection's address, which the scheduler records as the peer's source.
func TestReportSybil(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.State.BanQuorum = 2
	s := startServer(t, cfg)
	honest, b, c := newPeer(t), newPeer(t), newPeer(t)
	for _, h := range []*dhost.Host{honest, b, c} {
		wantOK(t, request(t, h, s, &wire.Register{Labels: map[string]string{"host": h.ID().String()}}))
	}
	wantOK(t, request(t, honest, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0, 1}}))
	for i, h := range []*dhost.Host{b, c} {
		ans := request(t, h, s, &wire.Route{Blob: blobA, Chunks: []uint32{uint32(i)}}).(*wire.Answer)
		if len(ans.Answer.Parents) != 1 {
			t.Fatalf("got parents %+v, want the honest peer", ans.Answer.Parents)
		}
		ok := wantOK(t, request(t, h, s, &wire.Report{About: honest.ID().String(), Outcome: scheduler.Outcome{Blob: blobA, BadBytes: true, BadChunk: uint32(i)}}))
		if ok.Banned {
			t.Fatalf("accusation %d from the same machine banned the parent", i+1)
		}
	}
	if bans := s.state.Bans(time.Now()); len(bans) != 0 {
		t.Errorf("bans %+v, want none", bans)
	}
	for _, p := range s.state.Peers(time.Now()) {
		if p.Source != "127.0.0.1" {
			t.Errorf("peer %s: source %q, want 127.0.0.1 (its connection's address, not its host label)", p.ID, p.Source)
		}
	}
}

// TestRegisterCapWire: a registration past state.max_peers is answered
// "too many peers"; the member keeps working, and its leaving makes room.
func TestRegisterCapWire(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.State.MaxPeers = 1
	s := startServer(t, cfg)
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	wantCode(t, request(t, b, s, &wire.Register{}), wire.CodeTooManyPeers)
	wantOK(t, request(t, a, s, &wire.Heartbeat{}))
	wantOK(t, request(t, a, s, &wire.Register{}))
	wantOK(t, request(t, a, s, &wire.Unregister{}))
	wantOK(t, request(t, b, s, &wire.Register{}))
}

// TestRouteSizeBoundsTurns: a Route's size reaches the scheduler's turn
// bound through the server. With b wanting the blob too, a asks for 40
// chunks twice: without a size it gets the count (4 turns), with 64 KiB
// chunks it gets turns up to origin_turn_bytes_per_peer (1 MiB: 16).
func TestRouteSizeBoundsTurns(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.State.OriginTurnsPerPeer = 4
	cfg.State.OriginTurnBytesPerPeer = 1 << 20
	s := startServer(t, cfg)
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, a, s, &wire.Register{}))
	wantOK(t, request(t, b, s, &wire.Register{}))
	turns := func(from uint32, bytes uint64) int {
		t.Helper()
		if resp, ok := request(t, b, s, &wire.Route{Blob: blobA, Chunks: []uint32{1000 + from}}).(*wire.Answer); !ok || len(resp.Answer.Origin) != 1 {
			t.Fatalf("b's route: %#v", resp)
		}
		chunks := make([]uint32, 40)
		for i := range chunks {
			chunks[i] = from + uint32(i)
		}
		ans, ok := request(t, a, s, &wire.Route{Blob: blobA, Chunks: chunks, Bytes: bytes}).(*wire.Answer)
		if !ok {
			t.Fatalf("a's route: got %#v", ans)
		}
		wantOK(t, request(t, a, s, &wire.Abandon{Blob: blobA, Chunks: ans.Answer.Origin}))
		return len(ans.Answer.Origin)
	}
	if n := turns(0, 0); n != 4 {
		t.Errorf("unsized: %d turns, want 4", n)
	}
	if n := turns(100, 40<<16); n != 16 {
		t.Errorf("sized, 64 KiB chunks: %d turns, want 16", n)
	}
}

// openSession opens a session stream from h.
func openSession(t *testing.T, h *dhost.Host, s *Server) network.Stream {
	t.Helper()
	st := openStreamOf(t, h, s, wire.SessionProtocolID)
	t.Cleanup(func() { st.Reset() })
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	return st
}

func sessionRequest(t *testing.T, st network.Stream, req wire.Message) (wire.Message, error) {
	t.Helper()
	if err := wire.WriteFrame(st, req); err != nil {
		return nil, err
	}
	return wire.ReadFrame(st)
}

// TestSession: a session stream carries one request after another, each
// answered in turn, and ends at a malformed frame; with a peer's sessions
// at MaxStreamsPerPeer, a further one is answered once and closed.
func TestSession(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MaxStreamsPerPeer = 2
	s := startServer(t, cfg)
	a, b := newPeer(t), newPeer(t)
	wantOK(t, request(t, b, s, &wire.Register{}))
	wantOK(t, request(t, b, s, &wire.Announce{Blob: blobA, Chunks: []uint32{0, 1}}))

	st := openSession(t, a, s)
	for _, req := range []wire.Message{&wire.Register{}, &wire.Heartbeat{}, &wire.Announce{Blob: blobA, Chunks: []uint32{5}}} {
		resp, err := sessionRequest(t, st, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Type(), err)
		}
		wantOK(t, resp)
	}
	resp, err := sessionRequest(t, st, &wire.Route{Blob: blobA, Chunks: []uint32{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if ans, ok := resp.(*wire.Answer); !ok || len(ans.Answer.Parents) != 1 || !equal(ans.Answer.Origin, []uint32{2}) {
		t.Fatalf("route on the session: %#v", resp)
	}
	// Its announcement counted: b is routed to a for chunk 5.
	if ans := request(t, b, s, &wire.Route{Blob: blobA, Chunks: []uint32{5}}).(*wire.Answer); len(ans.Answer.Parents) != 1 || ans.Answer.Parents[0].ID != a.ID().String() {
		t.Fatalf("b's route: %+v", ans.Answer)
	}

	// A second session is kept; the third is answered once and closed.
	st2 := openSession(t, a, s)
	if resp, err := sessionRequest(t, st2, &wire.Heartbeat{}); err != nil {
		t.Fatal(err)
	} else {
		wantOK(t, resp)
	}
	st3 := openSession(t, a, s)
	if resp, err := sessionRequest(t, st3, &wire.Heartbeat{}); err != nil {
		t.Fatal(err)
	} else {
		wantOK(t, resp)
	}
	if _, err := sessionRequest(t, st3, &wire.Heartbeat{}); err == nil {
		t.Fatal("a session past max_streams_per_peer answered a second request")
	}
	if resp, err := sessionRequest(t, st2, &wire.Heartbeat{}); err != nil {
		t.Fatalf("the second session: %v", err)
	} else {
		wantOK(t, resp)
	}
	if n := s.Sessions(); n != 2 {
		t.Errorf("Sessions() = %d with two kept sessions open, want 2", n)
	}
	_ = st2.Close()
	rafstest.Eventually(t, 10*time.Second, "the closed session to be counted out", func() bool { return s.Sessions() == 1 })

	// A malformed frame is answered, and ends the session.
	if _, err := st.Write([]byte{0, 0, 0, 1, 0x42}); err != nil {
		t.Fatal(err)
	}
	if resp, err := wire.ReadFrame(st); err != nil {
		t.Fatal(err)
	} else {
		wantCode(t, resp, wire.CodeBadRequest)
	}
	if _, err := sessionRequest(t, st, &wire.Heartbeat{}); err == nil {
		t.Fatal("a session went on after a malformed frame")
	}
}
