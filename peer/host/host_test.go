package host

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const echoProto protocol.ID = "/damselfly/test-echo/1.0.0"

// writeKey creates a cluster key file in dir and returns its path.
func writeKey(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := CreateClusterKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// testConfig is a loopback host config with its identity in dir.
func testConfig(dir, keyFile string) Config {
	c := Loopback(filepath.Join(dir, "identity.key"), keyFile)
	c.DialTimeout = 5 * time.Second
	return c
}

func startHost(t testing.TB, cfg Config) *Host {
	t.Helper()
	h, err := New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func echo(s network.Stream) {
	defer s.Close()
	io.Copy(s, s)
}

func TestConnectSameKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := writeKey(t, dir, "cluster.key")
	a := startHost(t, testConfig(filepath.Join(dir, "a"), key))
	b := startHost(t, testConfig(filepath.Join(dir, "b"), key))
	echoOnce(t, a, b, "hello, cluster")
}

// echoOnce connects b to a and sends msg through an echo stream.
func echoOnce(t *testing.T, a, b *Host, msg string) {
	t.Helper()
	a.SetStreamHandler(echoProto, echo)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	s, err := b.NewStream(ctx, a.ID(), echoProto)
	if err != nil {
		t.Fatalf("new stream: %v", err)
	}
	defer s.Close()
	if _, err := s.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(s); err != nil || string(got) != msg {
		t.Fatalf("echo: got %q, %v; want %q", got, err, msg)
	}
}

func TestTLSSameKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := writeKey(t, dir, "cluster.key")
	ca, cb := testConfig(filepath.Join(dir, "a"), key), testConfig(filepath.Join(dir, "b"), key)
	ca.Security, cb.Security = SecurityTLS, SecurityTLS
	a, b := startHost(t, ca), startHost(t, cb)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatalf("connect: %v", err)
	}
}

// TestRefused checks that a peer outside the cluster cannot connect, in
// either direction, and that the dial fails fast rather than timing out.
func TestRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := writeKey(t, dir, "cluster.key")
	other := writeKey(t, dir, "other.key")
	keyed := startHost(t, testConfig(filepath.Join(dir, "keyed"), key))
	keyed.SetStreamHandler(echoProto, echo)

	tests := []struct {
		name    string
		keyFile string // "" is an open cluster
	}{
		{"different key", other},
		{"no key", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := startHost(t, testConfig(filepath.Join(dir, tt.name), tt.keyFile))
			out.SetStreamHandler(echoProto, echo)
			for _, d := range []struct {
				name     string
				from, to *Host
			}{{"outsider dials", out, keyed}, {"member dials", keyed, out}} {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				start := time.Now()
				err := d.from.Connect(ctx, d.to.AddrInfo())
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Fatalf("%s: connected, want refused", d.name)
				}
				if d.from == out && tt.keyFile == "" {
					// An open-cluster host has no knock; it only sees the
					// connection closed.
				} else if !strings.Contains(err.Error(), ErrClusterKey.Error()) {
					t.Errorf("%s: got %v, want it to say %q", d.name, err, ErrClusterKey)
				}
				if took > 3*time.Second {
					t.Errorf("%s: refusal took %v, want well under the 5s dial timeout", d.name, took)
				}
				if n := len(d.to.Network().ConnsToPeer(d.from.ID())); n != 0 {
					t.Errorf("%s: %d connections at the callee, want 0", d.name, n)
				}
				d.from.Peerstore().ClearAddrs(d.to.ID())
			}
		})
	}
}

func TestIdentityPersists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := writeKey(t, dir, "cluster.key")
	cfg := testConfig(dir, key)

	h, err := New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := h.ID()
	h.Close()
	fi, err := os.Stat(cfg.IdentityFile)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("identity file mode %04o, want 0600", perm)
	}

	h, err = New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.ID() != first {
		t.Fatalf("peer ID after restart %s, want %s", h.ID(), first)
	}

	other := testConfig(filepath.Join(dir, "other"), key)
	h2 := startHost(t, other)
	if h2.ID() == first {
		t.Fatalf("two identity files gave the same peer ID %s", first)
	}
}

func TestNewRefusesBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := writeKey(t, dir, "cluster.key")
	idDir := filepath.Join(dir, "id")
	startHost(t, testConfig(idDir, key)).Close() // creates the identity

	chmod := func(p string, m os.FileMode) func(*testing.T) {
		return func(t *testing.T) {
			if err := os.Chmod(p, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	write := func(p, s string) func(*testing.T) {
		return func(t *testing.T) {
			if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		setup func(*testing.T)
		cfg   func() Config
		want  string
	}{
		{"identity group readable", chmod(filepath.Join(idDir, "identity.key"), 0o640),
			func() Config { return testConfig(idDir, key) }, "identity_file:"},
		{"cluster key world readable", chmod(key, 0o604),
			func() Config { return testConfig(filepath.Join(dir, "x"), key) }, "cluster_key_file:"},
		{"cluster key missing", func(*testing.T) {},
			func() Config { return testConfig(filepath.Join(dir, "x"), filepath.Join(dir, "absent")) }, "cluster_key_file:"},
		{"cluster key garbage", write(filepath.Join(dir, "garbage"), "hello\n"),
			func() Config { return testConfig(filepath.Join(dir, "x"), filepath.Join(dir, "garbage")) }, "not a cluster key file"},
		{"cluster key zero", write(filepath.Join(dir, "zero"), clusterKeyHeader+string(make64('0'))+"\n"),
			func() Config { return testConfig(filepath.Join(dir, "x"), filepath.Join(dir, "zero")) }, "all zeros"},
		{"identity garbage", write(filepath.Join(dir, "badid"), "not a key"),
			func() Config {
				c := testConfig(dir, filepath.Join(dir, "other.key"))
				c.IdentityFile = filepath.Join(dir, "badid")
				c.InsecureOpenCluster, c.ClusterKeyFile = true, ""
				return c
			}, "identity_file:"},
		{"invalid config", func(*testing.T) {}, func() Config { return Config{} }, "identity_file: must be set"},
	}
	for _, tt := range tests { // sequential: some share files
		t.Run(tt.name, func(t *testing.T) {
			tt.setup(t)
			h, err := New(t.Context(), tt.cfg(), nil)
			if err == nil {
				h.Close()
				t.Fatalf("New succeeded, want error mentioning %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want mention of %q", err, tt.want)
			}
		})
	}
	// Tightening the mode again is enough to start.
	if err := os.Chmod(key, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(idDir, "identity.key"), 0o600); err != nil {
		t.Fatal(err)
	}
	startHost(t, testConfig(idDir, key))
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestAnnounceAddrs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(dir, "")
	cfg.AnnounceAddrs = []string{"/ip4/10.1.2.3/tcp/30000"}
	h := startHost(t, cfg)
	got := h.Addrs()
	if len(got) != 1 || got[0].String() != cfg.AnnounceAddrs[0] {
		t.Fatalf("got addrs %v, want %v", got, cfg.AnnounceAddrs)
	}
	if _, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: h.ID(), Addrs: got}); err != nil {
		t.Fatal(err)
	}
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startHost(t, testConfig(filepath.Join(dir, "a"), ""))
	cfg := testConfig(filepath.Join(dir, "b"), "")
	cfg.ListenAddrs = []string{a.Addrs()[0].String()}
	h, err := New(t.Context(), cfg, nil)
	if err == nil {
		h.Close()
		t.Fatalf("second host on %s started, want an error", cfg.ListenAddrs[0])
	}
	if !strings.Contains(err.Error(), "listen_addrs[0]") {
		t.Fatalf("got %v, want it to name listen_addrs[0]", err)
	}
}
