package shaper

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server accepts connections on 127.0.0.1 and runs handle on each, until
// the test ends.
func server(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// start runs a Proxy to upstream until the test ends.
func start(t *testing.T, upstream string, cfg Config) *Proxy {
	t.Helper()
	p, err := New(upstream, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p
}

// within checks a measured rate against the cap: it must not exceed it by
// more than tol. A loaded machine can only make it slower (CI runs the race
// detector over every package at once on 2 cores: a 1 Gbit/s cap has been
// measured at a quarter of that there), so below the cap it only has to
// reach a twentieth: what a shaper that wrongly sleeps whole periods would
// not.
func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if got > want*(1+tol) || got < want/20 {
		t.Errorf("%s: got %.1f Mbit/s, want at most %.1f +%.0f%% and at least a twentieth of it", what, got/1e6, want/1e6, tol*100)
	}
}

// TestDownloadRate: one connection, and four sharing the link, each get
// the configured rate in total.
func TestDownloadRate(t *testing.T) {
	t.Parallel()
	const size = 2 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	up := server(t, func(c net.Conn) { c.Write(payload) })
	const bw = 80e6
	p := start(t, up, Config{Bandwidth: bw, RTT: 2 * time.Millisecond})
	for _, conns := range []int{1, 4} {
		start := time.Now()
		var wg sync.WaitGroup
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", p.Addr())
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				n, err := io.Copy(io.Discard, c)
				if err != nil || n != size {
					t.Errorf("read %d bytes, %v; want %d", n, err, size)
				}
			}()
		}
		wg.Wait()
		rate := float64(conns*size*8) / time.Since(start).Seconds()
		within(t, map[int]string{1: "one connection", 4: "four connections"}[conns], rate, bw, 0.15)
	}
	if s := p.Stats(); s.DownBytes != 5*size || s.Conns != 5 {
		t.Errorf("stats: got %+v, want %d bytes down in 5 connections", s, 5*size)
	}
}

// TestUploadRate: the client-to-upstream direction is capped too, and
// independently of the other.
func TestUploadRate(t *testing.T) {
	t.Parallel()
	const size = 2 << 20
	up := server(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		c.Write([]byte{byte(n >> 20)})
	})
	const bw = 80e6
	p := start(t, up, Config{Bandwidth: bw, RTT: 2 * time.Millisecond})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil || ack[0] != size>>20 {
		t.Fatalf("ack %v, %v", ack, err)
	}
	within(t, "upload", float64(size*8)/time.Since(begin).Seconds(), bw, 0.15)
}

// TestLatency: a round trip on an open connection takes at least the
// RTT, and the first one on a new connection one RTT more.
func TestLatency(t *testing.T) {
	t.Parallel()
	up := server(t, func(c net.Conn) { io.Copy(c, c) })
	const rtt = 20 * time.Millisecond
	p := start(t, up, Config{Bandwidth: 1e9, RTT: rtt})
	begin := time.Now()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ping := func() time.Duration {
		s := time.Now()
		var b [1]byte
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatal(err)
		}
		return time.Since(s)
	}
	ping()
	// The shaper must add at least the configured delay; load can only add
	// more, so the upper bounds are loose and only catch gross errors.
	if first := time.Since(begin); first < 2*rtt || first > 2*rtt+5*time.Second {
		t.Errorf("connect and first round trip: got %s, want at least %s (handshake + request)", first, 2*rtt)
	}
	for range 5 {
		if d := ping(); d < rtt || d > rtt+time.Second {
			t.Errorf("round trip: got %s, want at least %s", d, rtt)
		}
	}
}

// TestUpstreamDown: a connection to a dead upstream is closed at once.
func TestUpstreamDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := start(t, dead, Config{})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("read from a proxied dead upstream: %d bytes, %v; want EOF", n, err)
	}
}

// TestGigabit: the proxy keeps up with the fastest link the benchmarks
// emulate.
func TestGigabit(t *testing.T) {
	t.Parallel()
	const size = 32 << 20
	payload := make([]byte, size)
	up := server(t, func(c net.Conn) { c.Write(payload) })
	const bw = 1e9
	p := start(t, up, Config{Bandwidth: bw, RTT: 2 * time.Millisecond})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	if n, err := io.Copy(io.Discard, c); err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	within(t, "1 Gbit/s link", float64(size*8)/time.Since(begin).Seconds(), bw, 0.15)
}
