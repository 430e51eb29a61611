package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

// newNet makes a Net closed at the test's end, or skips (fails in CI)
// where namespaces cannot be made.
func newNet(t *testing.T) *Net {
	t.Helper()
	if err := netUsable(); err != nil {
		rafstest.SkipOrFail(t, err.Error())
	}
	n, err := NewNet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

func addHost(t *testing.T, n *Net, name string, link Link) *Host {
	t.Helper()
	h, err := n.AddHost(t.Context(), name, link)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// serveOnce accepts one connection on l and runs fn on it.
func serveOnce(t *testing.T, l net.Listener, fn func(net.Conn)) {
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fn(c)
	}()
}

func dial(ctx context.Context, h *Host, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if h == nil {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	return h.DialContext(ctx, "tcp", addr)
}

func TestNetReachAndIsolation(t *testing.T) {
	t.Parallel()
	n := newNet(t)
	a, b, c := addHost(t, n, "a", Link{}), addHost(t, n, "b", Link{}), addHost(t, n, "c", Link{})

	// b serves on its address; a and c reach it.
	l, err := b.Listen("tcp", b.HostPort(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.Copy(c, c)
			c.Close()
		}
	}()
	for _, h := range []*Host{a, c} {
		conn, err := dial(t.Context(), h, l.Addr().String())
		if err != nil {
			t.Fatalf("dial b from %s: %v", h.Name(), err)
		}
		fmt.Fprintf(conn, "hi from %s\n", h.Name())
		conn.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(conn)
		conn.Close()
		if want := "hi from " + h.Name() + "\n"; string(got) != want {
			t.Errorf("echo through b from %s: got %q, want %q", h.Name(), got, want)
		}
		if la := conn.LocalAddr().(*net.TCPAddr).IP.String(); la != h.Addr().String() {
			t.Errorf("dial from %s: local address %s, want %s", h.Name(), la, h.Addr())
		}
	}

	// The root namespace is not on the segment, and a host's loopback
	// is its own.
	root, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOnce(t, root, func(net.Conn) {})
	if conn, err := dial(t.Context(), a, root.Addr().String()); err == nil {
		conn.Close()
		t.Errorf("dial the root namespace's %s from a: got a connection", root.Addr())
	}
	if conn, err := dial(t.Context(), nil, l.Addr().String()); err == nil {
		conn.Close()
		t.Errorf("dial b's %s from the root namespace: got a connection", l.Addr())
	}
	own, err := a.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOnce(t, own, func(net.Conn) {})
	if conn, err := dial(t.Context(), a, own.Addr().String()); err != nil {
		t.Errorf("dial a's own loopback from a: %v", err)
	} else {
		conn.Close()
	}
	if conn, err := dial(t.Context(), b, own.Addr().String()); err == nil {
		conn.Close()
		t.Errorf("dial a's loopback %s from b: got a connection", own.Addr())
	}
}

// transfer sends size bytes from one host to another over TCP and
// returns the rate the receiver saw, in bits/s.
func transfer(t *testing.T, from, to *Host, size int64) float64 {
	t.Helper()
	l, err := to.Listen("tcp", to.HostPort(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		n   int64
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		done <- result{n, time.Since(start), err}
	}()
	conn, err := dial(t.Context(), from, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.CopyN(conn, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	r := <-done
	if r.err != nil || r.n != size {
		t.Fatalf("received %d bytes, %v; want %d", r.n, r.err, size)
	}
	return float64(size*8) / r.d.Seconds()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestNetCapsBothDirections checks that a host's link is capped by the
// kernel both ways: what it sends (egress of its own veth end) and what
// it receives (egress of the bridge's end). The band is wide; this is
// about the cap being there, not about tc's precision.
func TestNetCapsBothDirections(t *testing.T) {
	// Not parallel: throughput wants the machine to itself.
	n := newNet(t)
	const capped, size = 40e6, 8 << 20
	a := addHost(t, n, "a", Capped(capped))
	b := addHost(t, n, "b", Link{})
	for _, tc := range []struct {
		name     string
		from, to *Host
	}{
		{"upload", a, b},
		{"download", b, a},
	} {
		got := transfer(t, tc.from, tc.to, size)
		t.Logf("%s: %d MiB at %.1f Mbit/s (cap %.0f)", tc.name, size>>20, got/1e6, capped/1e6)
		if got < 0.5*capped || got > 1.3*capped {
			t.Errorf("%s through a %.0f Mbit/s cap: got %.1f Mbit/s, want 0.5x to 1.3x the cap", tc.name, capped/1e6, got/1e6)
		}
	}
	// Two uncapped hosts are not held to anything like the cap.
	c := addHost(t, n, "c", Link{})
	if got := transfer(t, b, c, size); got < 2*capped {
		t.Errorf("uncapped: got %.1f Mbit/s, want well over %.0f", got/1e6, capped/1e6)
	} else {
		t.Logf("uncapped: %.0f Mbit/s", got/1e6)
	}
}

func TestNetDelay(t *testing.T) {
	t.Parallel()
	n := newNet(t)
	const d = 20 * time.Millisecond
	a, err := n.AddHost(t.Context(), "a", Link{Delay: d})
	if errors.Is(err, ErrNoNetem) {
		// Delays are optional: rates are what the benchmarks need.
		t.Skipf("delays need netem: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := addHost(t, n, "b", Link{Delay: d})
	l, err := b.Listen("tcp", b.HostPort(0))
	if err != nil {
		t.Fatal(err)
	}
	serveOnce(t, l, func(c net.Conn) { io.Copy(c, c) })
	conn, err := dial(t.Context(), a, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.Write([]byte("x"))
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// Each packet is delayed d leaving a, d entering b, and again on the
	// way back.
	if rtt, want := time.Since(start), 4*d; rtt < want {
		t.Errorf("round trip a-b: got %s, want at least %s", rtt, want)
	} else {
		t.Logf("round trip a-b: %s (delays %s each way on each link)", rtt, d)
	}
}

// TestNetProc runs a process in a host: its pid is the program's own
// (not a wrapper's), it is in the host's namespace, and Stop stops it.
func TestNetProc(t *testing.T) {
	t.Parallel()
	n := newNet(t)
	a := addHost(t, n, "a", Link{})
	p, err := Start(ProcConfig{Name: "sleep", LogDir: t.TempDir(), Path: "sleep", Args: []string{"60"}, Netns: a.Netns()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	comm := func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Pid()))
		return strings.TrimSpace(string(b))
	}
	rafstest.Eventually(t, 5*time.Second, "the pid to be sleep's", func() bool { return comm() == "sleep" })
	var got, want syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", p.Pid()), &got); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(netnsDir, a.Netns()), &want); err != nil {
		t.Fatal(err)
	}
	if got.Ino != want.Ino {
		t.Errorf("process's network namespace: got inode %d, want %s's %d", got.Ino, a.Netns(), want.Ino)
	}
	var mine, its syscall.Stat_t
	syscall.Stat("/proc/self/ns/mnt", &mine)
	syscall.Stat(fmt.Sprintf("/proc/%d/ns/mnt", p.Pid()), &its)
	if mine.Ino != its.Ino {
		t.Errorf("process's mount namespace: got inode %d, want the harness's %d", its.Ino, mine.Ino)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}

	out, err := a.Run(t.Context(), 5*time.Second, "ip", "-br", "addr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), a.Addr().String()+"/16") {
		t.Errorf("ip addr in a: got %q, want %s/16 on it", out, a.Addr())
	}
}

// TestNetCloseKillsLeftovers checks that Close leaves nothing: a
// process still in a host is killed (and reported), the namespaces are
// gone.
func TestNetCloseKillsLeftovers(t *testing.T) {
	t.Parallel()
	if err := netUsable(); err != nil {
		rafstest.SkipOrFail(t, err.Error())
	}
	n, err := NewNet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	a, err := n.AddHost(t.Context(), "a", Capped(1e6))
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	p, err := Start(ProcConfig{Name: "sleep", LogDir: t.TempDir(), Path: "sleep", Args: []string{"60"}, Netns: a.Netns()})
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	// Start returns once nsenter runs, which may not have entered the
	// namespace yet (seen on a loaded machine): wait until it has, or
	// Close finds nothing to kill there.
	in := func() bool {
		out, err := exec.Command("ip", "netns", "pids", a.Netns()).Output()
		return err == nil && slices.Contains(strings.Fields(string(out)), strconv.Itoa(p.Pid()))
	}
	for deadline := time.Now().Add(10 * time.Second); !in(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.Kill()
			n.Close()
			t.Fatal("the process did not enter the namespace within 10s")
		}
	}
	if err := n.Close(); err == nil || !strings.Contains(err.Error(), "processes left") {
		t.Errorf("Close with a process left: got %v, want it reported", err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("the process left in a still runs after Close")
	}
	for _, ns := range []string{n.ID() + "-hub", a.Netns()} {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err == nil {
			t.Errorf("namespace %s is still there after Close", ns)
		}
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

// TestNetSweepsDeadNets checks that a new Net deletes the namespaces a
// killed run left (named as a Net names them, with no live lock) and
// leaves a live Net's alone.
func TestNetSweepsDeadNets(t *testing.T) {
	t.Parallel()
	live := newNet(t)
	addHost(t, live, "a", Link{})
	stale := fmt.Sprintf("%s%06x-hub", netPrefix, rand.Uint32()>>8) // unique to this run
	if _, err := runCmd(t.Context(), "ip", "netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNetns(context.Background(), stale) })
	newNet(t)
	if _, err := os.Stat(filepath.Join(netnsDir, stale)); err == nil {
		t.Errorf("stale namespace %s survived a new Net", stale)
	}
	for _, ns := range []string{live.ID() + "-hub", live.ID() + "-a"} {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
			t.Errorf("a live Net's namespace %s: %v", ns, err)
		}
	}
}

func TestNetRejectsBadHosts(t *testing.T) {
	t.Parallel()
	n := newNet(t)
	addHost(t, n, "a", Link{})
	for _, tc := range []struct {
		name string
		link Link
	}{
		{"a", Link{}},                     // taken
		{"hub", Link{}},                   // the hub's
		{"A", Link{}},                     // not lower case
		{"averyveryverylongname", Link{}}, // too long for interface names
		{"b", Link{Up: -1}},
	} {
		if _, err := n.AddHost(t.Context(), tc.name, tc.link); err == nil {
			t.Errorf("AddHost(%q, %+v): got nil error", tc.name, tc.link)
		}
	}
}

// TestRegistryInHost runs the origin in a host: hosts of the Net reach
// it at the host's address, the root namespace does not.
func TestRegistryInHost(t *testing.T) {
	t.Parallel()
	rafstest.RequireTool(t, "docker-registry")
	n := newNet(t)
	origin := addHost(t, n, "origin", Link{})
	node := addHost(t, n, "node", Capped(100e6))
	r, err := StartRegistry(t.Context(), RegistryConfig{Dir: t.TempDir(), Host: origin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	if !strings.HasPrefix(r.Host(), origin.Addr().String()+":") {
		t.Errorf("Host: got %s, want on %s", r.Host(), origin.Addr())
	}
	resp, err := node.HTTPClient().Get("http://" + r.Host() + "/v2/")
	if err != nil {
		t.Fatalf("GET /v2/ from node: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/ from node: got %s, want 200", resp.Status)
	}
	if resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + r.Host() + "/v2/"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /v2/ from the root namespace: got %s, want no route", resp.Status)
	}
}
