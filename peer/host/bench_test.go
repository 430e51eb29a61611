package host

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

const sinkProto = "/damselfly/test-sink/1.0.0"

// BenchmarkStreamThroughput measures one stream's throughput between two
// hosts on loopback, for each way of securing a connection: the cluster
// key proven after TLS (the default) or Noise, the cluster key as a
// private network under Noise or TLS, and TLS or Noise without a cluster
// key. Report MB/s.
func BenchmarkStreamThroughput(b *testing.B) {
	for _, bc := range []struct {
		name     string
		security string
		keyed    bool
		auth     string
	}{
		{"proof+tls", SecurityTLS, true, ClusterAuthProof},
		{"proof+noise", SecurityNoise, true, ClusterAuthProof},
		{"psk+noise", SecurityNoise, true, ClusterAuthPrivateNetwork},
		{"psk+tls", SecurityTLS, true, ClusterAuthPrivateNetwork},
		{"tls", SecurityTLS, false, ""},
		{"noise", SecurityNoise, false, ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			key := ""
			if bc.keyed {
				key = writeKey(b, dir, "cluster.key")
			}
			ca, cb := testConfig(filepath.Join(dir, "a"), key), testConfig(filepath.Join(dir, "b"), key)
			ca.Security, cb.Security = bc.security, bc.security
			ca.ClusterAuth, cb.ClusterAuth = bc.auth, bc.auth
			a, c := startHost(b, ca), startHost(b, cb)
			a.SetStreamHandler(sinkProto, func(s network.Stream) {
				io.Copy(io.Discard, s)
				s.Close()
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.Connect(ctx, a.AddrInfo()); err != nil {
				b.Fatal(err)
			}
			s, err := c.NewStream(ctx, a.ID(), sinkProto)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.CloseWrite(); err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, s) // wait until the sink has read it all
			b.StopTimer()
			s.Close()
		})
	}
}
