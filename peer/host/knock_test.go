package host

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// runBoth runs a handshake on both ends of a TCP pair, the dialer's
// and the listener's, closing each end whose side failed (as the
// transports do), and returns each side's error.
func runBoth(t *testing.T, dial, listen func(net.Conn) error) (dialErr, listenErr error) {
	t.Helper()
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(5 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		err := listen(b)
		if err != nil {
			b.Close()
		}
		done <- err
	}()
	dialErr = dial(a)
	if dialErr != nil {
		a.Close()
	}
	return dialErr, <-done
}

// runKnock knocks on both ends of a pipe and returns each side's error.
func runKnock(t *testing.T, dialerKey, listenerKey *knockKey) (dialErr, listenErr error) {
	t.Helper()
	return runBoth(t,
		func(c net.Conn) error { return knock(c, dialerKey, true) },
		func(c net.Conn) error { return knock(c, listenerKey, false) })
}

func TestKnock(t *testing.T) {
	t.Parallel()
	k1 := deriveKnockKey(bytes.Repeat([]byte{1}, 32))
	k2 := deriveKnockKey(bytes.Repeat([]byte{2}, 32))

	if d, l := runKnock(t, k1, k1); d != nil || l != nil {
		t.Fatalf("same key: got %v / %v, want nil / nil", d, l)
	}
	d, l := runKnock(t, k1, k2)
	if !errors.Is(d, ErrClusterKey) || !errors.Is(l, ErrClusterKey) {
		t.Fatalf("different keys: got %v / %v, want ErrClusterKey on both sides", d, l)
	}
}

// TestKnockForeignPeer checks that a peer speaking something else is
// refused as soon as its first byte differs from the magic, even if it
// sends only a few bytes and then waits.
func TestKnockForeignPeer(t *testing.T) {
	t.Parallel()
	k := deriveKnockKey(bytes.Repeat([]byte{1}, 32))
	for _, first := range []string{"\x13/multistream/1.0.0\n", "D", "DFLYKNK2"} {
		a, b := tcpPair(t)
		go func() {
			b.Write([]byte(first))
			io.Copy(io.Discard, b) // then only listens
		}()
		a.SetDeadline(time.Now().Add(time.Second))
		start := time.Now()
		err := knock(a, k, true)
		if first == "D" {
			// A prefix of the magic: the knock must wait for more,
			// until the deadline.
			if err == nil || errors.Is(err, ErrClusterKey) {
				t.Errorf("%q: got %v, want a timeout", first, err)
			}
		} else if !errors.Is(err, ErrClusterKey) || time.Since(start) > time.Second {
			t.Errorf("%q: got %v after %v, want ErrClusterKey at once", first, err, time.Since(start))
		}
		a.Close()
		b.Close()
	}
}

// TestKnockReflection checks that a peer that answers with our own nonce
// and proof (a mirror) is refused.
func TestKnockReflection(t *testing.T) {
	t.Parallel()
	k := deriveKnockKey(bytes.Repeat([]byte{1}, 32))
	a, b := tcpPair(t)
	defer a.Close()
	go func() {
		defer b.Close()
		buf := make([]byte, 1024)
		for {
			n, err := b.Read(buf)
			if err != nil {
				return
			}
			if _, err := b.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	if err := knock(a, k, true); !errors.Is(err, ErrClusterKey) {
		t.Fatalf("got %v, want ErrClusterKey", err)
	}
}

// tcpPair returns the two ends of a loopback TCP connection: unlike
// net.Pipe, writes are buffered, as the knock expects.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	return a, b
}
