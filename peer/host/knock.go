package host

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/transport"
	manet "github.com/multiformats/go-multiaddr/net"
)

// The cluster knock runs on every raw TCP connection of a keyed host,
// before libp2p's private-network layer. The private network alone keeps
// outsiders out, but it does not notice a wrong key: both ends decrypt
// garbage and multistream-select then often waits for bytes that never
// come, so a dial to or from an outsider hangs until its timeout. The knock
// turns that into an immediate, named failure ("does not hold this
// cluster's key") in both directions, for a peer with another key, with no
// key, or speaking something else, and it does so before the security
// handshake's public-key work. It adds one round trip to a new connection
// and nothing after. It is no substitute for the cluster proof (proof.go)
// or the private network: a relay in the middle could pass it on; what
// follows it is what such a relay cannot pass.
//
// Each side sends, without waiting:
//
//	8  bytes  magic "DFLYKNK1"
//	32 bytes  a fresh random nonce
//
// reads the other side's (failing at the first byte that differs from the
// magic), then sends and reads
//
//	32 bytes  HMAC-SHA256(K, role || own nonce || other's nonce)
//
// where K = HMAC-SHA256(cluster key, "damselfly cluster knock v1") and role
// is "dialer" or "listener", so that a side's proof cannot be reflected
// back to it. A proof that does not verify closes the connection.
const (
	knockMagic    = "DFLYKNK1"
	knockNonceLen = 32
	knockMACLen   = sha256.Size
	knockLabel    = "damselfly cluster knock v1"
)

// ErrClusterKey is the cause of a failed connection whose other end does
// not hold this host's cluster key (another key, no key, or not a
// damselfly peer). libp2p wraps it in its dial error text.
var ErrClusterKey = errors.New("the remote end does not hold this cluster's key")

type knockKey [sha256.Size]byte

func deriveKnockKey(psk []byte) *knockKey {
	return deriveKnockKeyFor(psk, ClusterAuthPrivateNetwork)
}

// deriveKnockKeyFor is the knock key of a host whose ClusterAuth is auth.
// The two modes knock with different keys, so that a host of one meets a
// host of the other with a named refusal in the knock, not a connection
// whose next layer waits for bytes that never make sense (a private
// network's cipher text, read as a security negotiation, can leave a
// dial hanging until its timeout).
func deriveKnockKeyFor(psk []byte, auth string) *knockKey {
	m := hmac.New(sha256.New, psk)
	m.Write([]byte(knockLabel))
	if auth == ClusterAuthProof {
		m.Write([]byte(" proof"))
	}
	var k knockKey
	copy(k[:], m.Sum(nil))
	return &k
}

func (k *knockKey) proof(role string, own, other []byte) []byte {
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte(role))
	m.Write(own)
	m.Write(other)
	return m.Sum(nil)
}

// knock runs the handshake on c as the dialer or the listener.
func knock(c io.ReadWriter, k *knockKey, dialer bool) error {
	return knockAlt(c, k, nil, "", dialer)
}

// knockAlt is knock that, when the other side's proof does not verify
// with k but does with alt (the key of the other ClusterAuth, named
// altAuth), says so.
func knockAlt(c io.ReadWriter, k, alt *knockKey, altAuth string, dialer bool) error {
	var out, in [len(knockMagic) + knockNonceLen]byte
	copy(out[:], knockMagic)
	if _, err := rand.Read(out[len(knockMagic):]); err != nil {
		return err
	}
	if _, err := c.Write(out[:]); err != nil {
		return err
	}
	// Compare the magic as bytes arrive: a peer that speaks something else
	// may send fewer than 8 bytes and then wait for an answer.
	for n := 0; n < len(knockMagic); {
		m, err := c.Read(in[n:len(knockMagic)])
		n += m
		if string(in[:n]) != knockMagic[:n] {
			return fmt.Errorf("%w: it does not speak the cluster handshake", ErrClusterKey)
		}
		if err != nil && n < len(knockMagic) {
			return err
		}
	}
	if _, err := io.ReadFull(c, in[len(knockMagic):]); err != nil {
		return err
	}
	own, other := out[len(knockMagic):], in[len(knockMagic):]
	if hmac.Equal(own, other) {
		return fmt.Errorf("%w: it echoed our nonce", ErrClusterKey)
	}
	me, them := "dialer", "listener"
	if !dialer {
		me, them = them, me
	}
	if _, err := c.Write(k.proof(me, own, other)); err != nil {
		return err
	}
	var got [knockMACLen]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return err
	}
	if !hmac.Equal(got[:], k.proof(them, other, own)) {
		if alt != nil && hmac.Equal(got[:], alt.proof(them, other, own)) {
			return fmt.Errorf("%w: it holds the key but uses cluster_auth %q, unlike this host", ErrClusterKey, altAuth)
		}
		return fmt.Errorf("%w: its proof of the key does not verify", ErrClusterKey)
	}
	return nil
}

// knockUpgrader wraps libp2p's upgrader so that every connection the TCP
// transport dials or accepts knocks first.
type knockUpgrader struct {
	transport.Upgrader
	key     *knockKey
	alt     *knockKey // the other ClusterAuth's knock key, to name a mismatch
	altAuth string
	timeout time.Duration
	log     *slog.Logger
	lastLog atomic.Int64 // unix nanos of the last refusal logged, to rate-limit
}

var _ transport.Upgrader = (*knockUpgrader)(nil)

func (u *knockUpgrader) Upgrade(ctx context.Context, t transport.Transport, c manet.Conn, dir network.Direction, p peer.ID, scope network.ConnManagementScope) (transport.CapableConn, error) {
	return u.Upgrader.Upgrade(ctx, t, u.wrap(c, dir == network.DirOutbound), dir, p, scope)
}

func (u *knockUpgrader) GateMaListener(l manet.Listener) transport.GatedMaListener {
	return &knockListener{GatedMaListener: u.Upgrader.GateMaListener(l), u: u}
}

func (u *knockUpgrader) UpgradeListener(t transport.Transport, l manet.Listener) transport.Listener {
	return u.UpgradeGatedMaListener(t, u.GateMaListener(l))
}

func (u *knockUpgrader) wrap(c manet.Conn, dialer bool) *knockConn {
	return &knockConn{Conn: c, u: u, dialer: dialer}
}

// refused logs a failed knock, at most once a second.
func (u *knockUpgrader) refused(c *knockConn, err error) {
	now := time.Now().UnixNano()
	last := u.lastLog.Load()
	if now-last < int64(time.Second) || !u.lastLog.CompareAndSwap(last, now) {
		return
	}
	dir := "inbound"
	if c.dialer {
		dir = "outbound"
	}
	u.log.Warn("host: refused connection", "dir", dir, "remote", c.RemoteMultiaddr(), "err", err)
}

type knockListener struct {
	transport.GatedMaListener
	u *knockUpgrader
}

// Accept returns at once; the knock runs at the connection's first read or
// write, in libp2p's per-connection upgrade goroutine, so a slow client
// does not hold up the accept loop.
func (l *knockListener) Accept() (manet.Conn, network.ConnManagementScope, error) {
	c, scope, err := l.GatedMaListener.Accept()
	if err != nil {
		return c, scope, err
	}
	return l.u.wrap(c, false), scope, nil
}

// knockConn runs the knock before the first byte of its caller's traffic.
type knockConn struct {
	manet.Conn
	u      *knockUpgrader
	dialer bool

	done atomic.Bool
	mu   sync.Mutex // held during the knock; guards err and the deadlines below
	err  error
	// Deadlines the caller set; while the knock runs it has its own, and
	// these are applied after it.
	rd, wd time.Time
}

func (c *knockConn) ensure() error {
	if c.done.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return nil
	}
	if c.err != nil {
		return c.err
	}
	limit := time.Now().Add(c.u.timeout)
	rd, wd := earliest(c.rd, limit), earliest(c.wd, limit)
	_ = c.Conn.SetReadDeadline(rd)
	_ = c.Conn.SetWriteDeadline(wd)
	err := knockAlt(c.Conn, c.u.key, c.u.alt, c.u.altAuth, c.dialer)
	if err != nil {
		c.err = fmt.Errorf("cluster handshake with %s: %w", c.RemoteMultiaddr(), err)
		c.u.refused(c, err)
		c.Conn.Close()
		return c.err
	}
	_ = c.Conn.SetReadDeadline(c.rd)
	_ = c.Conn.SetWriteDeadline(c.wd)
	c.done.Store(true)
	return nil
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func (c *knockConn) Read(p []byte) (int, error) {
	if err := c.ensure(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *knockConn) Write(p []byte) (int, error) {
	if err := c.ensure(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *knockConn) SetDeadline(t time.Time) error {
	if c.done.Load() {
		return c.Conn.SetDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd, c.wd = t, t
	if c.done.Load() {
		return c.Conn.SetDeadline(t)
	}
	return nil
}

func (c *knockConn) SetReadDeadline(t time.Time) error {
	if c.done.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	if c.done.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	return nil
}

func (c *knockConn) SetWriteDeadline(t time.Time) error {
	if c.done.Load() {
		return c.Conn.SetWriteDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wd = t
	if c.done.Load() {
		return c.Conn.SetWriteDeadline(t)
	}
	return nil
}

// The TCP transport sets these on accepted connections through type
// assertions; pass them on.

func (c *knockConn) SetKeepAlive(on bool) error {
	if k, ok := c.Conn.(interface{ SetKeepAlive(bool) error }); ok {
		return k.SetKeepAlive(on)
	}
	return nil
}

func (c *knockConn) SetKeepAlivePeriod(d time.Duration) error {
	if k, ok := c.Conn.(interface{ SetKeepAlivePeriod(time.Duration) error }); ok {
		return k.SetKeepAlivePeriod(d)
	}
	return nil
}

func (c *knockConn) SetLinger(sec int) error {
	if k, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return k.SetLinger(sec)
	}
	return nil
}

var _ net.Conn = (*knockConn)(nil)
