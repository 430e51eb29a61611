package exchange

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	dhost "damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// testChunk is a chunk with its stored bytes and content.
type testChunk struct {
	rafs.Chunk
	stored, content []byte
}

var encoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		panic(err)
	}
	return e
})

// makeChunks makes n chunks of size bytes, laid out one after another in
// a blob: compressible content stored compressed when compress is set,
// random content stored raw otherwise.
func makeChunks(seed uint64, n, size int, compress bool) []testChunk {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]testChunk, n)
	var off uint64
	for i := range out {
		content := make([]byte, size)
		for j := range content {
			if compress {
				content[j] = "abcdefgh"[r.IntN(8)]
			} else {
				content[j] = byte(r.Uint32())
			}
		}
		c := rafs.Chunk{Index: uint32(i), Digest: sha256.Sum256(content), Size: uint32(size), CompressedOffset: off}
		stored := content
		if compress {
			stored = encoder().EncodeAll(content, nil)
			c.Flags = rafs.ChunkCompressed
		}
		c.CompressedSize = uint32(len(stored))
		off += uint64(len(stored))
		out[i] = testChunk{Chunk: c, stored: stored, content: content}
	}
	return out
}

func chunksOf(tcs []testChunk) []rafs.Chunk {
	out := make([]rafs.Chunk, len(tcs))
	for i, tc := range tcs {
		out[i] = tc.Chunk
	}
	return out
}

// newCache opens a node cache in a temp dir holding tcs.
func newCache(t testing.TB, tcs []testChunk) *cache.Cache {
	t.Helper()
	c, err := cache.Open(cache.Default(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, tc := range tcs {
		if err := c.PutChunk(tc.Chunk, tc.stored); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// clusterKey returns a cluster key file shared by the hosts of one test.
func clusterKey(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := dhost.CreateClusterKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// newHost starts a host on loopback in the cluster of keyFile, with mods
// applied to its config.
func newHost(t testing.TB, keyFile string, mods ...func(*dhost.Config)) *dhost.Host {
	t.Helper()
	cfg := dhost.Loopback(filepath.Join(t.TempDir(), "identity.key"), keyFile)
	cfg.DialTimeout = 5 * time.Second
	for _, m := range mods {
		m(&cfg)
	}
	h, err := dhost.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// pair starts a server host and a client host in one cluster and
// connects them.
func pair(t testing.TB, mods ...func(*dhost.Config)) (srv, cli *dhost.Host) {
	t.Helper()
	key := clusterKey(t)
	srv, cli = newHost(t, key, mods...), newHost(t, key, mods...)
	connect(t, cli, srv)
	return srv, cli
}

func connect(t testing.TB, from, to *dhost.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := from.Connect(ctx, to.AddrInfo()); err != nil {
		t.Fatal(err)
	}
}

// newServer starts an exchange server on h, closed at cleanup.
func newServer(t testing.TB, h *dhost.Host, store Store, cfg ServerConfig) *Server {
	t.Helper()
	s, err := NewServer(h, store, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// collector is a deliver func that checks every chunk it gets and
// records their digests.
type collector struct {
	t   testing.TB
	mu  sync.Mutex
	got []rafs.Digest
}

func (c *collector) deliver(ck rafs.Chunk, stored []byte) error {
	dst := make([]byte, ck.Size)
	if err := rafs.DecodeChunk(ck, stored, dst); err != nil {
		c.t.Errorf("delivered chunk %s does not verify: %v", ck.Digest, err)
	}
	c.mu.Lock()
	c.got = append(c.got, ck.Digest)
	c.mu.Unlock()
	return nil
}

// flipStore serves the bytes of a Store with one byte flipped in the
// chunks it names.
type flipStore struct {
	*cache.Cache
	flip map[rafs.Digest]bool
}

func (s flipStore) Get(d cache.Key, dst []byte) (cache.Meta, []byte, error) {
	m, b, err := s.Cache.Get(d, dst)
	if err == nil && s.flip[d.Digest] {
		b[len(b)/2] ^= 0x40
	}
	return m, b, err
}

// gateStore blocks every Get until release is closed.
type gateStore struct {
	Store
	entered chan struct{}
	release chan struct{}
}

func (s gateStore) Get(d cache.Key, dst []byte) (cache.Meta, []byte, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Get(d, dst)
}
