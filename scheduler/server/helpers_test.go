package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	lpeer "github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	dhost "damselfly/peer/host"
	"damselfly/scheduler/wire"
)

// testConfig is a scheduler on loopback with a short expiry interval.
func testConfig(t testing.TB) Config {
	cfg := Default()
	cfg.Admin.Listen = "127.0.0.1:0"
	// Long enough that peers of tests that send no heartbeats stay
	// members on a loaded machine; TestExpiry shortens it.
	cfg.State.PeerTTL = time.Minute
	cfg.ExpireInterval = 50 * time.Millisecond
	return cfg
}

// startServer runs a scheduler on a loopback host until the test ends.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	ctx, cancelStart := context.WithTimeout(t.Context(), 30*time.Second)
	h, err := dhost.New(ctx, dhost.Loopback(filepath.Join(t.TempDir(), "identity.key"), ""), nil)
	cancelStart()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, h, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// newPeer starts a libp2p host on loopback, closed when the test ends.
func newPeer(t testing.TB) *dhost.Host {
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

// request sends one request from h to the scheduler and returns the
// response.
func request(t *testing.T, h *dhost.Host, s *Server, req wire.Message) wire.Message {
	t.Helper()
	resp, err := tryRequest(t.Context(), h, s.AddrInfo(), req)
	if err != nil {
		t.Fatalf("%s: %v", req.Type(), err)
	}
	return resp
}

func tryRequest(ctx context.Context, h *dhost.Host, to lpeer.AddrInfo, req wire.Message) (wire.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, to); err != nil {
		return nil, err
	}
	st, err := h.NewStream(ctx, to.ID, wire.ProtocolID)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	if err := wire.WriteFrame(st, req); err != nil {
		return nil, err
	}
	_ = st.CloseWrite()
	return wire.ReadFrame(st)
}

// wantOK fails unless resp is OK.
func wantOK(t *testing.T, resp wire.Message) *wire.OK {
	t.Helper()
	ok, isOK := resp.(*wire.OK)
	if !isOK {
		t.Fatalf("got %#v, want OK", resp)
	}
	return ok
}

// wantCode fails unless resp is an error with code.
func wantCode(t *testing.T, resp wire.Message, code wire.Code) {
	t.Helper()
	e, ok := resp.(*wire.Error)
	if !ok || e.Code != code {
		t.Fatalf("got %#v, want error %s", resp, code)
	}
}

// openStream opens a scheduler stream from h and sends nothing.
func openStream(t *testing.T, h *dhost.Host, s *Server) network.Stream {
	t.Helper()
	return openStreamOf(t, h, s, wire.ProtocolID)
}

// openStreamOf opens a stream of protocol id from h to the scheduler.
func openStreamOf(t *testing.T, h *dhost.Host, s *Server, id protocol.ID) network.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, s.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	st, err := h.NewStream(ctx, s.AddrInfo().ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rawRequest writes frame as it is and reads the response.
func rawRequest(t *testing.T, h *dhost.Host, s *Server, frame []byte) wire.Message {
	t.Helper()
	st := openStream(t, h, s)
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := st.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseWrite()
	resp, err := wire.ReadFrame(st)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp
}
