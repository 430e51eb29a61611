package fetch

import (
	"context"
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
)

// soloHostCache is what an engine with no peers runs on: a libp2p host
// that does not listen and a node cache in a temporary directory, both
// closed at the end of the test.
func soloHostCache(t *testing.T) (host.Host, *cache.Cache) {
	t.Helper()
	h, err := libp2p.New(libp2p.NoListenAddrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, err := cache.Open(cache.Default(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return h, c
}

// soloConfig is an engine Config for such tests: short deadlines, one
// parent and one origin range at a time.
func soloConfig() Config {
	return Config{FetchDeadline: 5 * time.Second, RouteTimeout: time.Second, ParentTimeout: time.Second,
		AvoidDuration: time.Second, SlowAvoidDuration: time.Second, MaxParallelParents: 1,
		OriginMaxRange: 1 << 20, MaxParallelOrigin: 1, MaxRetryDelay: 100 * time.Millisecond}
}

// countingCache counts the lookups of a real node cache.
type countingCache struct {
	*cache.Cache
	has atomic.Int64
}

func (c *countingCache) Has(k cache.Key) bool {
	c.has.Add(1)
	return c.Cache.Has(k)
}

// memHoldings is Holdings in memory.
type memHoldings struct {
	mu   sync.Mutex
	held map[cache.Key]bool
}

func (h *memHoldings) PartOf(_ rafs.Digest, k cache.Key) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[k]
}

func (h *memHoldings) Hold(_ rafs.Digest, _ uint32, k cache.Key) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	news := !h.held[k]
	h.held[k] = true
	return news
}

func (h *memHoldings) Missed(rafs.Digest, cache.Key) {}

// memOrigin serves one blob from memory, noting how many cache lookups
// had been made when it was asked.
type memOrigin struct {
	blob    []byte
	reads   atomic.Int64
	lookups func() int64
	before  atomic.Int64 // lookups made before the last read
}

func (o *memOrigin) ReadRange(_ context.Context, _ registry.Ref, _ rafs.Digest, off int64, p []byte) error {
	o.reads.Add(1)
	o.before.Store(o.lookups())
	copy(p, o.blob[off:])
	return nil
}

// A cold miss looks at the node cache once on the peer before it goes to
// the origin: the read's own lookup is carried into the fetch. (After
// the chunk is written, one more lookup checks that the write was not
// evicted at once, before the chunk is announced.) A second read of the
// chunk is a hit: one lookup.
func TestColdMissProbesCacheOnce(t *testing.T) {
	t.Parallel()
	h, c := soloHostCache(t)
	cc := &countingCache{Cache: c}
	data := []byte("a raw chunk of a blob, stored as it is")
	chunk := rafs.Chunk{Digest: rafs.Digest(sha256.Sum256(data)), CompressedSize: uint32(len(data)), Size: uint32(len(data))}
	o := &memOrigin{blob: data, lookups: cc.has.Load}
	e, err := New(soloConfig(), Deps{Host: h, Cache: cc, Holdings: &memHoldings{held: map[cache.Key]bool{}}, Origin: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	blob := rafs.Digest{7}
	read := func() {
		t.Helper()
		err := e.ReadChunks(t.Context(), registry.Ref{}, blob, []rafs.Chunk{chunk}, func(_ int, _ rafs.Chunk, stored []byte) error {
			if string(stored) != string(data) {
				t.Errorf("got %q, want %q", stored, data)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	read()
	if got := o.before.Load(); got != 1 {
		t.Errorf("cold miss: got %d cache lookups before the origin read, want 1", got)
	}
	if got := o.reads.Load(); got != 1 {
		t.Errorf("cold miss: got %d origin reads, want 1", got)
	}
	after := cc.has.Load()
	read()
	if got := cc.has.Load() - after; got != 1 {
		t.Errorf("then a hit: got %d cache lookups, want 1", got)
	}
	if got := o.reads.Load(); got != 1 {
		t.Errorf("then a hit: got %d origin reads in all, want 1", got)
	}
}
