package server

import (
	"testing"

	ma "github.com/multiformats/go-multiaddr"
)

func TestSourceOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr, want string
	}{
		{"/ip4/192.0.2.7/tcp/4001", "192.0.2.7"},
		{"/ip4/192.0.2.7/tcp/4002", "192.0.2.7"}, // the port does not count
		{"/ip4/127.0.0.1/udp/9/quic-v1", "127.0.0.1"},
		{"/ip6/2001:db8:1:2:aaaa::1/tcp/4001", "2001:db8:1:2::/64"},
		{"/ip6/2001:db8:1:2:bbbb::9/tcp/4001", "2001:db8:1:2::/64"}, // same /64, same machine
		{"/ip6/::ffff:192.0.2.7/tcp/4001", "192.0.2.7"},
		{"/ip4/198.51.100.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit", "198.51.100.1"},
		{"/dns4/example.com/tcp/4001", ""},
	}
	for _, tt := range tests {
		a, err := ma.NewMultiaddr(tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := sourceOf(a); got != tt.want {
			t.Errorf("sourceOf(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
