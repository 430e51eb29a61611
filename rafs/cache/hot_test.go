package cache

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"
)

// A chunk just put is read from memory: its file can go bad on disk
// meanwhile without the reader seeing it, and the hit is counted.
func TestHotServesRecentPuts(t *testing.T) {
	t.Parallel()
	c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = 8 << 20; return cc }())
	tc := makeChunk(1, 1<<20, true)
	mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
	// Damage the file: a read that went to the disk would fail its CRC.
	path := c.paths.entry(KeyOf(tc.ck))
	if err := os.WriteFile(path, make([]byte, headerSize+len(tc.stored)), 0o644); err != nil {
		t.Fatal(err)
	}
	m, got, err := c.Get(KeyOf(tc.ck), nil)
	if err != nil || m != tc.meta() || !bytes.Equal(got, tc.stored) {
		t.Fatalf("Get: meta %+v, %d bytes, %v", m, len(got), err)
	}
	data := make([]byte, tc.ck.Size)
	if err := c.ReadChunk(tc.ck, data); err != nil || !bytes.Equal(data, tc.data) {
		t.Fatalf("ReadChunk: %v", err)
	}
	s := c.Stats()
	if s.HotHits != 2 || s.Hits != 2 || s.HotEntries != 1 || s.HotBytes != int64(len(tc.stored)) || s.Corrupt != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

// Whatever makes the cache forget a file drops it from memory too.
func TestHotForgetsWhatTheCacheDrops(t *testing.T) {
	t.Parallel()
	t.Run("Remove", func(t *testing.T) {
		t.Parallel()
		c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = 8 << 20; return cc }())
		tc := makeChunk(2, 4096, false)
		mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
		if err := c.Remove(KeyOf(tc.ck)); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.Get(KeyOf(tc.ck), nil)
		wantNotFound(t, "Get after Remove", err)
		wantNotFound(t, "ReadChunk after Remove", c.ReadChunk(tc.ck, make([]byte, tc.ck.Size)))
		if s := c.Stats(); s.HotEntries != 0 || s.HotHits != 0 {
			t.Fatalf("stats: %+v", s)
		}
	})
	t.Run("evicted", func(t *testing.T) {
		t.Parallel()
		const n = 64 << 10
		entry := int64(headerSize + n)
		c := openTest(t, func() Config { cc := Default(""); cc.Capacity, cc.HotBytes = 10*entry, 64*n; return cc }())
		var gone []Key
		var mu sync.Mutex
		c.SetEvictHook(func(ds []Key) { mu.Lock(); gone = append(gone, ds...); mu.Unlock() })
		for i := range uint64(20) {
			mustPut(t, c, fakeDigest(i), rawMeta(n), content(i, n))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(gone) == 0 {
			t.Fatal("nothing evicted")
		}
		for _, d := range gone {
			_, _, err := c.Get(d, nil)
			wantNotFound(t, "Get of an evicted entry", err)
		}
		if s := c.Stats(); s.HotHits != 0 || s.HotEntries != 20-len(gone) {
			t.Fatalf("%d evicted; stats: %+v", len(gone), s)
		}
	})
	t.Run("file missing", func(t *testing.T) {
		t.Parallel()
		c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = 8 << 20; return cc }())
		tc := makeChunk(3, 4096, false)
		mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
		if err := os.Remove(c.paths.entry(KeyOf(tc.ck))); err != nil {
			t.Fatal(err)
		}
		if c.Has(KeyOf(tc.ck)) {
			t.Fatal("Has: true for a deleted file")
		}
		_, _, err := c.Get(KeyOf(tc.ck), nil)
		wantNotFound(t, "Get after the file was deleted and noticed", err)
	})
}

// A chunk that does not decode to what the reader asks for is not served
// from memory: the reader gets what the file gives (here a corrupt entry,
// deleted).
func TestHotReadChunkVerifies(t *testing.T) {
	t.Parallel()
	c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = 8 << 20; return cc }())
	tc := makeChunk(4, 8192, true)
	mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
	// Bytes put under a digest they do not have (Put trusts its caller).
	wrong := makeChunk(5, 8192, true)
	other := tc.ck
	other.Digest[0] ^= 1
	other.CompressedSize = wrong.ck.CompressedSize
	mustPut(t, c, KeyOf(other), wrong.meta(), wrong.stored)
	err := c.ReadChunk(other, make([]byte, other.Size))
	wantNotFound(t, "ReadChunk of bytes that do not match the digest", err)
	if s := c.Stats(); s.HotHits != 0 || s.Corrupt != 1 || s.HotEntries != 1 {
		t.Fatalf("stats: %+v", s)
	}
	if c.Has(KeyOf(other)) {
		t.Fatal("the corrupt entry's file is still there")
	}
}

// The budget bounds the memory hot allocates, however entries come and
// go, and displaced buffers are reused rather than allocated again.
func TestHotBudget(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	h := newHot(budget)
	sizes := []int{64 << 10, 200 << 10, 100, 256 << 10, 256<<10 + 1, 4096}
	for i := range 500 {
		n := sizes[i%len(sizes)]
		d := fakeDigest(uint64(i))
		h.keep(d, rawMeta(n), content(uint64(i), n))
		if h.allocated > budget {
			t.Fatalf("after %d keeps: %d bytes allocated, budget %d", i+1, h.allocated, budget)
		}
		_, live := h.stats()
		if live > budget {
			t.Fatalf("after %d keeps: %d bytes live", i+1, live)
		}
		ok := h.get(d, func(_ Meta, b []byte, _ time.Time) {})
		if want := n <= budget/hotChunkLimit; ok != want {
			t.Fatalf("keep of %d bytes: held %v, want %v", n, ok, want)
		}
	}
	// The newest entries are there with their bytes; the oldest are not.
	for i := 499; i >= 495; i-- {
		n := sizes[i%len(sizes)]
		if n > budget/hotChunkLimit {
			continue
		}
		var got []byte
		if !h.get(fakeDigest(uint64(i)), func(_ Meta, b []byte, _ time.Time) { got = bytes.Clone(b) }) {
			t.Fatalf("entry %d displaced", i)
		}
		if !bytes.Equal(got, content(uint64(i), n)) {
			t.Fatalf("entry %d: wrong bytes", i)
		}
	}
	if h.get(fakeDigest(0), func(Meta, []byte, time.Time) {}) {
		t.Fatal("the first entry is still held")
	}
}

// Memory a reader is copying from is not reused under it; it is recycled
// once the reader is done.
func TestHotReaderKeepsBuffer(t *testing.T) {
	t.Parallel()
	const n = 1000
	h := newHot(4 * n)
	h.keep(fakeDigest(0), rawMeta(n), content(0, n))
	h.get(fakeDigest(0), func(_ Meta, b []byte, _ time.Time) {
		// Displace it (and everything) while it is read.
		for i := range uint64(8) {
			h.keep(fakeDigest(100+i), rawMeta(n), content(100+i, n))
		}
		h.forget(fakeDigest(0))
		if !bytes.Equal(b, content(0, n)) {
			t.Error("bytes changed under the reader")
		}
		if h.allocated > 4*n {
			t.Errorf("%d bytes allocated, budget %d", h.allocated, 4*n)
		}
	})
	if h.get(fakeDigest(0), func(Meta, []byte, time.Time) {}) {
		t.Fatal("a forgotten entry is served")
	}
	h.keep(fakeDigest(200), rawMeta(n), content(200, n))
	if h.allocated > 4*n {
		t.Fatalf("%d bytes allocated, budget %d", h.allocated, 4*n)
	}
}

// Readers and writers at once: every read sees whole, right bytes.
func TestHotConcurrent(t *testing.T) {
	t.Parallel()
	c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = 1 << 20; return cc }())
	const n = 32 << 10
	var wg sync.WaitGroup
	for w := range uint64(4) {
		wg.Go(func() {
			for i := range uint64(50) {
				seed := w*1000 + i
				d := fakeDigest(seed)
				want := content(seed, n)
				if err := c.Put(d, rawMeta(n), want); err != nil {
					t.Error(err)
					return
				}
				for j := uint64(0); j <= i; j += 7 {
					s := w*1000 + j
					_, got, err := c.Get(fakeDigest(s), nil)
					if err != nil || !bytes.Equal(got, content(s, n)) {
						t.Errorf("Get %d: %d bytes, %v", s, len(got), err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if s := c.Stats(); s.HotHits == 0 || s.HotHits == s.Hits {
		t.Fatalf("want hits both from memory and from disk: %+v", s)
	}
}

// Through the page cache (asked for, or because the file system refuses
// direct I/O) the cache keeps nothing in memory of its own.
func TestHotOnlyWithDirect(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]*Cache{
		"buffered": openTestIO(t, func() Config { cc := Default(""); cc.HotBytes = 8 << 20; return cc }()),
		"refused":  openTestIO(t, Config{HotBytes: 8 << 20, DirectIO: true, probeDirect: func(string) bool { return false }}),
	} {
		tc := makeChunk(6, 4096, false)
		mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
		if _, _, err := c.Get(KeyOf(tc.ck), nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := c.Stats(); s.HotEntries != 0 || s.HotHits != 0 || s.Hits != 1 {
			t.Errorf("%s: stats %+v", name, s)
		}
	}
}

// A limited cache keeps no more in memory than its capacity, however
// much HotBytes grants: its memory is what it holds on disk at most.
func TestHotBudgetWithinCapacity(t *testing.T) {
	t.Parallel()
	const n = 16 << 10
	capacity := int64(8 * (headerSize + n))
	c := openTest(t, func() Config { cc := Default(""); cc.Capacity, cc.HotBytes = capacity, 32<<20; return cc }())
	if c.hot == nil || c.hot.budget != capacity {
		t.Fatalf("hot budget %v, want the capacity %d", c.hot, capacity)
	}
	for i := range 64 {
		tc := makeChunk(uint64(100+i), n, false)
		mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
		if s := c.Stats(); s.HotBytes > capacity || c.hot.allocated > capacity {
			t.Fatalf("after %d puts: %d bytes in memory, %d allocated, capacity %d", i+1, s.HotBytes, c.hot.allocated, capacity)
		}
	}
	if s := c.Stats(); s.HotEntries == 0 {
		t.Fatalf("nothing kept in memory: %+v", s)
	}
	// Unlimited caches keep what HotBytes says.
	if got := hotBudget(func() Config { cc := Default(""); cc.HotBytes = 32 << 20; return cc }()); got != 32<<20 {
		t.Fatalf("unlimited cache: budget %d", got)
	}
}
