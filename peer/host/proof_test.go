package host

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// side is one end of a proof exchange: the key it holds and the peer IDs
// it believes its connection is between.
type side struct {
	key         *knockKey
	self, other string
}

// runProof runs the proof on both ends of a TCP pair and returns each
// side's error.
func runProof(t *testing.T, dialer, listener side) (dialErr, listenErr error) {
	t.Helper()
	return runBoth(t,
		func(c net.Conn) error {
			return proveMembership(c, dialer.key, true, []byte(dialer.self), []byte(dialer.other))
		},
		func(c net.Conn) error {
			return proveMembership(c, listener.key, false, []byte(listener.self), []byte(listener.other))
		})
}

func TestProof(t *testing.T) {
	t.Parallel()
	k1 := deriveProofKey(bytes.Repeat([]byte{1}, 32))
	k2 := deriveProofKey(bytes.Repeat([]byte{2}, 32))
	tests := []struct {
		name             string
		dialer, listener side
		ok               bool
	}{
		{"members", side{k1, "A", "B"}, side{k1, "B", "A"}, true},
		{"other key", side{k1, "A", "B"}, side{k2, "B", "A"}, false},
		// The outsider C relays a member's proof: the member (M) computed
		// it for its own connection, between M and B, but B's connection
		// is with C, so B expects a proof for (C, B).
		{"relayed proof", side{k1, "M", "B"}, side{k1, "B", "C"}, false},
		// A proof cannot be turned around: the roles are in the MAC.
		{"same ids both ways", side{k1, "A", "A"}, side{k1, "A", "A"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, l := runProof(t, tt.dialer, tt.listener)
			if tt.ok {
				if d != nil || l != nil {
					t.Fatalf("got %v / %v, want nil / nil", d, l)
				}
				return
			}
			if !errors.Is(d, ErrClusterKey) && !errors.Is(l, ErrClusterKey) {
				t.Fatalf("got %v / %v, want ErrClusterKey on a side", d, l)
			}
		})
	}
}

// TestProofKeyIsNotKnockKey: the proof and the knock use different keys
// derived from the cluster key, so a knock's MAC is never a valid proof.
func TestProofKeyIsNotKnockKey(t *testing.T) {
	t.Parallel()
	psk := bytes.Repeat([]byte{7}, 32)
	if *deriveProofKey(psk) == *deriveKnockKey(psk) {
		t.Fatal("proof and knock keys are equal")
	}
}

// TestClusterAuthMismatch: a host that proves and one on a private
// network share a key but not a protocol; the knock tells them apart, so
// the dial fails promptly, naming the cause, and leaves no connection.
func TestClusterAuthMismatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := writeKey(t, dir, "cluster.key")
	ca, cb := testConfig(filepath.Join(dir, "a"), key), testConfig(filepath.Join(dir, "b"), key)
	cb.ClusterAuth = ClusterAuthPrivateNetwork
	a, b := startHost(t, ca), startHost(t, cb)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := b.Connect(ctx, a.AddrInfo())
	if err == nil {
		t.Fatal("a private-network host connected to a proving one")
	}
	if !strings.Contains(err.Error(), "cluster_auth") {
		t.Errorf("got %v, want it to name cluster_auth", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("refusal took %v, want well under the 5 s dial timeout", took)
	}
	if n := len(a.Network().ConnsToPeer(b.ID())); n != 0 {
		t.Errorf("%d connections at the callee, want 0", n)
	}
}

// TestEveryClusterAuth connects two members in each mode and security.
func TestEveryClusterAuth(t *testing.T) {
	t.Parallel()
	for _, auth := range []string{ClusterAuthProof, ClusterAuthPrivateNetwork} {
		for _, security := range []string{SecurityTLS, SecurityNoise} {
			t.Run(auth+"+"+security, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				key := writeKey(t, dir, "cluster.key")
				ca, cb := testConfig(filepath.Join(dir, "a"), key), testConfig(filepath.Join(dir, "b"), key)
				ca.ClusterAuth, cb.ClusterAuth = auth, auth
				ca.Security, cb.Security = security, security
				a, b := startHost(t, ca), startHost(t, cb)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				if err := b.Connect(ctx, a.AddrInfo()); err != nil {
					t.Fatalf("connect: %v", err)
				}
				conns := b.Network().ConnsToPeer(a.ID())
				if len(conns) == 0 {
					t.Fatal("no connection after Connect")
				}
				want := map[string]string{
					ClusterAuthProof + "+" + SecurityTLS:            proofTLSID,
					ClusterAuthProof + "+" + SecurityNoise:          proofNoiseID,
					ClusterAuthPrivateNetwork + "+" + SecurityTLS:   "/tls/",
					ClusterAuthPrivateNetwork + "+" + SecurityNoise: "/noise",
				}[auth+"+"+security]
				if got := string(conns[0].ConnState().Security); !strings.HasPrefix(got, want) {
					t.Errorf("security protocol %q, want %q", got, want)
				}
			})
		}
	}
}
