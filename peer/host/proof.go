package host

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/sec"
	tptu "github.com/libp2p/go-libp2p/p2p/net/upgrader"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
)

// The cluster proof (ClusterAuthProof) keeps outsiders out without
// libp2p's private network, whose stream cipher under Noise halves a
// connection's throughput and costs a core per few hundred MB/s. Right
// after the security handshake (TLS 1.3 or Noise), which has
// authenticated both peer IDs, each side proves over the encrypted
// connection that it holds the cluster key, in a MAC bound to both peer
// IDs and to fresh nonces:
//
//	8  bytes  magic "DFLYPRF1"
//	32 bytes  a fresh random nonce
//
// sent at once by each side; then, after reading the other side's,
//
//	32 bytes  HMAC-SHA256(K, role || u16 len || own peer ID ||
//	                         u16 len || other peer ID || own nonce || other nonce)
//
// with K = HMAC-SHA256(cluster key, "damselfly cluster proof v1") and role
// "dialer" or "listener". A proof that does not verify fails the upgrade
// with ErrClusterKey, before the muxer carries a single stream.
//
// The binding is what the knock lacks. An outsider that relays a
// member's knock passes it, but it cannot relay this proof: the member
// computed it for the member's own ID and the ID at the other end of its
// own encrypted connection, and the outsider's connection has the
// outsider's ID at one end. The knock still runs first on the raw TCP
// connection, so outsiders are told apart, and refused, before any
// public-key work.
const (
	proofMagic = "DFLYPRF1"
	proofLabel = "damselfly cluster proof v1"
)

// proofTransport is a security transport (TLS or Noise) followed by the
// cluster proof. Its protocol ID differs from the inner one's, so a peer
// that does not prove (a private-network peer, or an older build) fails
// the security negotiation instead of waiting for a proof.
type proofTransport struct {
	inner   sec.SecureTransport
	id      protocol.ID
	key     *knockKey
	timeout time.Duration
}

var _ sec.SecureTransport = (*proofTransport)(nil)

// Protocol IDs of the security transports with the cluster proof.
const (
	proofTLSID   = "/damselfly/tls-cluster/1.0.0"
	proofNoiseID = "/damselfly/noise-cluster/1.0.0"
)

// proofSecurity returns the protocol ID and the libp2p constructor of the
// security transport security (SecurityTLS or SecurityNoise) with the
// cluster proof keyed by psk.
func proofSecurity(security string, psk []byte, timeout time.Duration) (string, any) {
	key := deriveProofKey(psk)
	if security == SecurityNoise {
		return proofNoiseID, func(id protocol.ID, priv crypto.PrivKey, muxers []tptu.StreamMuxer) (*proofTransport, error) {
			t, err := noise.New(id, priv, muxers)
			if err != nil {
				return nil, err
			}
			return &proofTransport{inner: t, id: id, key: key, timeout: timeout}, nil
		}
	}
	return proofTLSID, func(id protocol.ID, priv crypto.PrivKey, muxers []tptu.StreamMuxer) (*proofTransport, error) {
		t, err := libp2ptls.New(id, priv, muxers)
		if err != nil {
			return nil, err
		}
		return &proofTransport{inner: t, id: id, key: key, timeout: timeout}, nil
	}
}

func deriveProofKey(psk []byte) *knockKey {
	m := hmac.New(sha256.New, psk)
	m.Write([]byte(proofLabel))
	var k knockKey
	copy(k[:], m.Sum(nil))
	return &k
}

func (t *proofTransport) ID() protocol.ID { return t.id }

func (t *proofTransport) SecureInbound(ctx context.Context, insecure net.Conn, p peer.ID) (sec.SecureConn, error) {
	c, err := t.inner.SecureInbound(ctx, insecure, p)
	if err != nil {
		return nil, err
	}
	return t.prove(ctx, c, false)
}

func (t *proofTransport) SecureOutbound(ctx context.Context, insecure net.Conn, p peer.ID) (sec.SecureConn, error) {
	c, err := t.inner.SecureOutbound(ctx, insecure, p)
	if err != nil {
		return nil, err
	}
	return t.prove(ctx, c, true)
}

// prove runs the proof on c, within ctx and the transport's timeout, and
// returns c, or closes it and fails.
func (t *proofTransport) prove(ctx context.Context, c sec.SecureConn, dialer bool) (sec.SecureConn, error) {
	deadline := time.Now().Add(t.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	err := proveMembership(c, t.key, dialer, []byte(c.LocalPeer()), []byte(c.RemotePeer()))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster proof with %s: %w", c.RemotePeer(), err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// proveMembership runs the proof's exchange on c for the side whose peer
// ID is own, talking to other.
func proveMembership(c io.ReadWriter, k *knockKey, dialer bool, own, other []byte) error {
	var out, in [len(proofMagic) + knockNonceLen]byte
	copy(out[:], proofMagic)
	if _, err := rand.Read(out[len(proofMagic):]); err != nil {
		return err
	}
	if _, err := c.Write(out[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, in[:]); err != nil {
		return err
	}
	if string(in[:len(proofMagic)]) != proofMagic {
		return fmt.Errorf("%w: it does not send the cluster proof", ErrClusterKey)
	}
	ownNonce, otherNonce := out[len(proofMagic):], in[len(proofMagic):]
	if hmac.Equal(ownNonce, otherNonce) {
		return fmt.Errorf("%w: it echoed our nonce", ErrClusterKey)
	}
	me, them := "dialer", "listener"
	if !dialer {
		me, them = them, me
	}
	if _, err := c.Write(proofMAC(k, me, own, other, ownNonce, otherNonce)); err != nil {
		return err
	}
	var got [knockMACLen]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return err
	}
	if !hmac.Equal(got[:], proofMAC(k, them, other, own, otherNonce, ownNonce)) {
		return fmt.Errorf("%w: its proof of the key does not verify", ErrClusterKey)
	}
	return nil
}

// proofMAC is the proof of the side in role whose peer ID is self,
// talking to peer.
func proofMAC(k *knockKey, role string, self, peer, selfNonce, peerNonce []byte) []byte {
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte(role))
	for _, id := range [][]byte{self, peer} {
		m.Write(binary.BigEndian.AppendUint16(nil, uint16(len(id))))
		m.Write(id)
	}
	m.Write(selfNonce)
	m.Write(peerNonce)
	return m.Sum(nil)
}
