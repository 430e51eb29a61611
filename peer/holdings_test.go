package peer

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/rafstest"
)

func TestHoldingsRoundTrip(t *testing.T) {
	blob := rafs.Digest(sha256.Sum256([]byte("blob")))
	hs := []holding{{0, cache.SHA256(sha256.Sum256([]byte("a")))}, {7, cache.Key{Algo: rafs.DigestBlake3, Digest: sha256.Sum256([]byte("b"))}}, {1 << 19, cache.SHA256(sha256.Sum256([]byte("c")))},
		{1<<19 + 1, cache.Key{Algo: rafs.DigestStoredBlake3, Digest: sha256.Sum256([]byte("d"))}}}
	b := encodeHoldings(blob, hs)
	got, err := decodeHoldings(blob, b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, hs) {
		t.Errorf("got %v, want %v", got, hs)
	}
	other := rafs.Digest(sha256.Sum256([]byte("other")))
	for name, bad := range map[string][]byte{
		"short":       b[:20],
		"other blob":  encodeHoldings(other, hs),
		"flipped bit": append(slices.Clone(b[:len(b)-5]), b[len(b)-5]^1, b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1]),
		"truncated":   b[:len(b)-1],
		"unordered":   encodeHoldings(blob, []holding{hs[1], hs[0]}),
		"algorithm 4": encodeHoldings(blob, []holding{{1, cache.Key{Algo: 4, Digest: blob}}}),
	} {
		if _, err := decodeHoldings(blob, bad); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

func FuzzDecodeHoldings(f *testing.F) {
	blob := rafs.Digest(sha256.Sum256([]byte("blob")))
	f.Add(encodeHoldings(blob, nil))
	f.Add(encodeHoldings(blob, []holding{{1, cache.SHA256(blob)}, {2, cache.Key{Algo: rafs.DigestBlake3, Digest: blob}}}))
	f.Add(encodeHoldings(blob, []holding{{3, cache.Key{Algo: rafs.DigestStoredBlake3, Digest: blob}}}))
	f.Add([]byte(holdingsMagic))
	f.Add(encodeHoldingsV1(blob, []holding{{1, cache.SHA256(blob)}, {9, cache.SHA256(blob)}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := decodeHoldings(blob, b)
		if err != nil {
			return
		}
		again := encodeHoldings(blob, hs)
		if binary.BigEndian.Uint32(b[8:]) == holdingsVersion1 {
			// Written again as version 2, with the same holdings.
			hs2, err := decodeHoldings(blob, again)
			if err != nil || !slices.Equal(hs, hs2) {
				t.Fatalf("version 1 file rewritten as version 2: got %v, %v; want %v", hs2, err, hs)
			}
			return
		}
		if string(again) != string(b) {
			t.Fatal("decoded file does not encode back to itself")
		}
	})
}

// encodeHoldingsV1 lays hs out as the release before wrote holdings
// files: version 1, no digest algorithm.
func encodeHoldingsV1(blob rafs.Digest, hs []holding) []byte {
	b := append([]byte(holdingsMagic), 0, 0, 0, holdingsVersion1)
	b = append(b, blob[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hs)))
	for _, h := range hs {
		b = binary.BigEndian.AppendUint32(b, h.Ordinal)
		b = append(b, h.Key.Digest[:]...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// A holdings file of the release before is read, its chunks as SHA-256
// ones (as the cache reads its own version 1 entries).
func TestHoldingsVersion1(t *testing.T) {
	t.Parallel()
	blob := rafs.Digest(sha256.Sum256([]byte("blob")))
	hs := []holding{{3, cache.SHA256(sha256.Sum256([]byte("a")))}, {4, cache.SHA256(sha256.Sum256([]byte("b")))}}
	got, err := decodeHoldings(blob, encodeHoldingsV1(blob, hs))
	if err != nil || !slices.Equal(got, hs) {
		t.Fatalf("got %v, %v; want %v", got, err, hs)
	}
	// An algorithm byte the format does not know is refused.
	b := encodeHoldings(blob, hs)
	b[holdingsHeader+4] = 9
	b = binary.BigEndian.AppendUint32(b[:len(b)-4], crc32.Checksum(b[:len(b)-4], crcTable))
	if _, err := decodeHoldings(blob, b); !errors.Is(err, errHoldingsCorrupt) {
		t.Errorf("unknown algorithm: got %v, want errHoldingsCorrupt", err)
	}
}

func TestHoldingsPersistedAndReannounced(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	st, key := newScheduler(t), clusterKey(t)
	hdir := filepath.Join(t.TempDir(), "holdings")
	fast := func(c *NodeConfig) {
		c.HoldingsDir = hdir
		c.HoldingsCheckInterval = 20 * time.Millisecond
		c.HoldingsFlushInterval = 20 * time.Millisecond
	}
	a := newNode(t, key, st, nodeOpts{cfg: fast})
	if err := readAll(testCtx(t), a.Node, o.ref(), img.blob, img.chunks); err != nil {
		t.Fatal(err)
	}
	a.stop()
	if _, err := os.Stat(filepath.Join(hdir, hexOf(img.blob))); err != nil {
		t.Fatalf("holdings not written: %v", err)
	}
	// A corrupt file of another blob is ignored.
	stranger := rafs.Digest(sha256.Sum256([]byte("stranger")))
	if err := os.WriteFile(filepath.Join(hdir, hexOf(stranger)), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Restart over the same cache with a fresh scheduler: the node
	// announces what it holds.
	a.router = newRouter(t, newScheduler(t), a.h)
	a.start(t, fast)
	all := make([]uint32, len(img.chunks))
	for i, c := range img.chunks {
		all[i] = c.Ordinal
	}
	rafstest.Eventually(t, 20*time.Second, "holdings announced", func() bool {
		ann, _, _ := a.router.snapshot()
		got := slices.Sorted(slices.Values(ann[img.blob]))
		return slices.Equal(slices.Compact(got), all)
	})
	if _, err := os.Stat(filepath.Join(hdir, hexOf(stranger))); err == nil {
		t.Error("corrupt holdings file left in place")
	}

	// Evict two chunks by hand: the node drops them.
	gone := []uint32{img.chunks[1].Ordinal, img.chunks[4].Ordinal}
	for _, i := range []int{1, 4} {
		if err := a.cache.Remove(cache.KeyOf(img.chunks[i])); err != nil {
			t.Fatal(err)
		}
	}
	rafstest.Eventually(t, 20*time.Second, "evicted chunks dropped", func() bool {
		_, dropped, _ := a.router.snapshot()
		return slices.Equal(slices.Sorted(slices.Values(dropped[img.blob])), gone)
	})
	rafstest.Eventually(t, 20*time.Second, "holdings file rewritten", func() bool {
		hs, err := readHoldings(filepath.Join(hdir, hexOf(img.blob)), img.blob)
		return err == nil && len(hs) == len(img.chunks)-2
	})
}

// dropDigests forgets the holdings of digests that are gone, in every
// blob or in one, and keeps those the cache has again.
func TestHoldingsDropKeys(t *testing.T) {
	d := func(s string) cache.Key { return cache.SHA256(sha256.Sum256([]byte(s))) }
	b1, b2 := d("blob1").Digest, d("blob2").Digest
	h := newHoldings("", nil)
	h.add(b1, 0, d("x"))
	h.add(b1, 1, d("y"))
	h.add(b1, 2, d("x")) // the same chunk twice in a blob
	h.add(b2, 5, d("x"))
	h.add(b2, 6, d("z"))
	back := d("z") // written again since it was evicted
	has := func(x cache.Key) bool { return x == back }

	got := h.dropKeys(map[cache.Key]struct{}{d("x"): {}, back: {}}, &b2, has)
	if len(got) != 1 || !slices.Equal(got[b2], []uint32{5}) {
		t.Fatalf("blob2 only: dropped %v, want blob2 [5]", got)
	}
	got = h.dropKeys(map[cache.Key]struct{}{d("x"): {}}, nil, has)
	if len(got) != 1 || !slices.Equal(got[b1], []uint32{0, 2}) {
		t.Fatalf("all blobs: dropped %v, want blob1 [0 2]", got)
	}
	snap := h.snapshot()
	if len(snap[b1]) != 1 || snap[b1][0].Ordinal != 1 || len(snap[b2]) != 1 || snap[b2][0].Ordinal != 6 {
		t.Errorf("left %v, want blob1 [1] and blob2 [6]", snap)
	}
	if _, ok := h.dirty[b1]; !ok {
		t.Error("blob1 not marked for writing")
	}
}

// The index of keys per blob follows every change of the holdings, and
// survives a reload from disk.
func TestHoldsKeyFollowsHoldings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHoldings(dir, nil)
	b := rafs.Digest{9}
	k1, k2, k3 := cache.SHA256(rafs.Digest{1}), cache.SHA256(rafs.Digest{2}), cache.SHA256(rafs.Digest{3})
	check := func(what string, k cache.Key, want bool) {
		t.Helper()
		if got := h.holdsKey(b, k); got != want {
			t.Errorf("%s: holdsKey = %v, want %v", what, got, want)
		}
	}
	h.add(b, 1, k1)
	h.add(b, 2, k1) // the same content twice in the blob
	check("added twice", k1, true)
	check("never added", k2, false)
	if h.holdsKey(rafs.Digest{8}, k1) {
		t.Error("holdsKey true for a blob never held")
	}
	h.remove(b, []uint32{1})
	check("one of two ordinals removed", k1, true)
	h.remove(b, []uint32{2})
	check("both removed", k1, false)
	h.add(b, 3, k2)
	h.add(b, 3, k3) // the ordinal now holds other content
	check("replaced", k2, false)
	check("replacement", k3, true)
	h.add(b, 4, k2)
	h.dropKeys(map[cache.Key]struct{}{k2: {}}, nil, func(cache.Key) bool { return false })
	check("dropped by key", k2, false)
	h.check(func(k cache.Key) bool { return k != k3 })
	check("dropped by check", k3, false)
	h.add(b, 5, k1)
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	h2 := newHoldings(dir, nil)
	if err := h2.load(); err != nil {
		t.Fatal(err)
	}
	if !h2.holdsKey(b, k1) || h2.holdsKey(b, k3) {
		t.Errorf("after a reload: holdsKey(k1) %v, holdsKey(k3) %v; want true, false", h2.holdsKey(b, k1), h2.holdsKey(b, k3))
	}
}
