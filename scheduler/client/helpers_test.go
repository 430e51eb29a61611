package client

import (
	"context"
	schedd "damselfly/scheduler/daemon"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	dhost "damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/scheduler"
	"damselfly/scheduler/server"
)

// testScheduler is a scheduler daemon that a test can stop and restart
// with the same identity and address.
type testScheduler struct {
	t        *testing.T
	identity string
	listen   string
	srv      *server.Server
	cancel   context.CancelFunc
	done     chan error
	edit     func(*server.Config) // changes the default config, if set
}

func startScheduler(t *testing.T) *testScheduler {
	t.Helper()
	return startSchedulerWith(t, nil)
}

// startSchedulerWith is startScheduler with its config changed by edit.
func startSchedulerWith(t *testing.T, edit func(*server.Config)) *testScheduler {
	t.Helper()
	ts := &testScheduler{t: t, identity: filepath.Join(t.TempDir(), "identity.key"), listen: "/ip4/127.0.0.1/tcp/0", edit: edit}
	ts.start()
	// Restarts reuse the port the first start got.
	ts.listen = ts.srv.AddrInfo().Addrs[0].String()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testScheduler) start() {
	ts.t.Helper()
	cfg := schedd.Default(ts.t.TempDir())
	cfg.Host = dhost.Loopback(ts.identity, "")
	cfg.Host.ListenAddrs = []string{ts.listen}
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.State.PeerTTL = time.Second
	cfg.ExpireInterval = 50 * time.Millisecond
	if ts.edit != nil {
		ts.edit(&cfg.Config)
	}
	s, err := schedd.New(cfg, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts.srv, ts.cancel, ts.done = s, cancel, make(chan error, 1)
	go func() { ts.done <- s.Run(ctx) }()
}

// stop stops the scheduler; it is a no-op on a stopped one.
func (ts *testScheduler) stop() {
	if ts.cancel == nil {
		return
	}
	ts.cancel()
	if err := <-ts.done; err != nil {
		ts.t.Errorf("scheduler Run: %v", err)
	}
	ts.cancel = nil
}

// addr is the scheduler's multiaddr with its peer ID.
func (ts *testScheduler) addr() string {
	ai := ts.srv.AddrInfo()
	return fmt.Sprintf("%s/p2p/%s", ai.Addrs[0], ai.ID)
}

func (ts *testScheduler) name() string { return ts.srv.AddrInfo().ID.String() }

// held returns how many blobs and chunks the scheduler knows peerID
// holds; -1 blobs if it does not know the peer.
func (ts *testScheduler) held(peerID string) (blobs int, chunks int64) {
	for _, v := range ts.srv.State().Peers(time.Now()) {
		if v.ID == peerID {
			return v.Blobs, v.Chunks
		}
	}
	return -1, 0
}

func newPeer(t *testing.T) *dhost.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h, err := dhost.New(ctx, dhost.Loopback(filepath.Join(t.TempDir(), "identity.key"), ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// testClientConfig is a client of the given schedulers with short intervals.
func testClientConfig(scheds ...*testScheduler) Config {
	cfg := Default()
	for _, s := range scheds {
		cfg.Schedulers = append(cfg.Schedulers, s.addr())
	}
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.RouteTimeout = time.Second
	cfg.RequestTimeout = time.Second
	return cfg
}

// startClient runs a client on h until the test ends.
func startClient(t *testing.T, h *dhost.Host, cfg Config) *Client {
	t.Helper()
	c, err := New(h, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("client Run: %v", err)
		}
	})
	return c
}

// blobOwnedBy returns a blob digest that Pick gives to want among names.
func blobOwnedBy(t *testing.T, want string, names []string) rafs.Digest {
	t.Helper()
	for i := range 1000 {
		d := rafs.Digest{byte(i), byte(i >> 8), 0x5c}
		if scheduler.Pick(d, names) == want {
			return d
		}
	}
	t.Fatalf("no blob owned by %s", want)
	return rafs.Digest{}
}
