package exchange

import (
	"fmt"
	"sync"
	"testing"

	dhost "damselfly/peer/host"
	"damselfly/rafs"
)

// BenchmarkFetch measures chunk throughput between two hosts on loopback:
// 1 MiB chunks, 16 per request, over one stream or four at once, with and
// without the server's own digest check. Chunks are random (stored raw) or
// compressible (stored zstd); MB/s counts stored bytes. Security is
// the default (cluster key as a private network, Noise) or, to size the
// alternative DESIGN.md suggests, TLS without the private network.
func BenchmarkFetch(b *testing.B) {
	const perBatch = 16
	chunks := map[bool]func() []testChunk{
		false: sync.OnceValue(func() []testChunk { return makeChunks(40, 4*perBatch, 1<<20, false) }),
		true:  sync.OnceValue(func() []testChunk { return makeChunks(41, 4*perBatch, 1<<20, true) }),
	}
	type security struct {
		name string
		mod  func(*dhost.Config)
	}
	for _, sec := range []security{
		{"psk+noise", func(*dhost.Config) {}},
		{"tls", func(c *dhost.Config) {
			c.Security, c.ClusterKeyFile, c.InsecureOpenCluster = dhost.SecurityTLS, "", true
		}},
	} {
		for _, compress := range []bool{false, true} {
			for _, verify := range []bool{true, false} {
				for _, streams := range []int{1, 4} {
					form := map[bool]string{false: "raw", true: "zstd"}[compress]
					name := fmt.Sprintf("%s/%s/streams=%d/serververify=%v", sec.name, form, streams, verify)
					b.Run(name, func(b *testing.B) {
						tcs := chunks[compress]()
						var stored int64
						for _, tc := range tcs[:perBatch] {
							stored += int64(len(tc.stored))
						}
						srvHost, cli := pair(b, sec.mod)
						newServer(b, srvHost, newCache(b, tcs), func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = !verify; return c }())
						deliver := func(rafs.Chunk, []byte) error { return nil }
						b.SetBytes(stored * int64(streams))
						b.ResetTimer()
						for b.Loop() {
							var wg sync.WaitGroup
							for i := range streams {
								batch := chunksOf(tcs[i*perBatch : (i+1)*perBatch])
								wg.Go(func() {
									if _, err := Fetch(b.Context(), cli, srvHost.ID(), rafs.Digest{}, batch, deliver); err != nil {
										b.Error(err)
									}
								})
							}
							wg.Wait()
						}
					})
				}
			}
		}
	}
}
