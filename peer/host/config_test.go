package host

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Loopback("id", "k")
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error; none means valid
	}{
		{"valid", func(*Config) {}, nil},
		{"default", func(c *Config) { *c = Default("/var/lib/damselfly") }, nil},
		{"open cluster", func(c *Config) { c.ClusterKeyFile = ""; c.InsecureOpenCluster = true }, nil},
		{"tls", func(c *Config) { c.Security = SecurityTLS }, nil},
		{"noise over a private network", func(c *Config) { c.Security, c.ClusterAuth = SecurityNoise, ClusterAuthPrivateNetwork }, nil},
		{"ipv6 and dns", func(c *Config) { c.ListenAddrs = []string{"/ip6/::/tcp/7946", "/dns4/node-1/tcp/7946"} }, nil},
		{"announce", func(c *Config) { c.AnnounceAddrs = []string{"/ip4/10.0.0.1/tcp/30000"} }, nil},
		{"everything wrong", func(c *Config) {
			*c = Config{
				ListenAddrs:     []string{"/ip4/0.0.0.0/udp/1/quic-v1", "nonsense", "/tcp/1"},
				AnnounceAddrs:   []string{"/ip4/999.0.0.1/tcp/1"},
				Security:        "ssl",
				ClusterAuth:     "psk",
				MaxConns:        -1,
				MaxConnsPerPeer: -2,
				DialTimeout:     -1,
			}
		}, []string{
			"identity_file: must be set",
			"listen_addrs[0]:", "QUIC cannot carry",
			"listen_addrs[1]:",
			"listen_addrs[2]:", "IP address or DNS",
			"announce_addrs[0]:",
			"cluster_key_file: must be set",
			`security: "ssl"`,
			`cluster_auth: "psk"`,
			"max_conns: -1",
			"max_conns_per_peer: -2",
			"dial_timeout: -1ns",
		}},
		{"no listen addrs", func(c *Config) { c.ListenAddrs = nil }, []string{"listen_addrs: must name"}},
		{"key and open", func(c *Config) { c.InsecureOpenCluster = true }, []string{"insecure_open_cluster: set together"}},
		{"per peer above total", func(c *Config) { c.MaxConns = 4; c.MaxConnsPerPeer = 5 }, []string{"max_conns_per_peer: 5 is above max_conns 4"}},
		{"default per peer above total", func(c *Config) { c.MaxConns = 4 }, []string{"max_conns_per_peer: 8 is above max_conns 4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			c.ListenAddrs = append([]string(nil), ok.ListenAddrs...)
			tt.mod(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
