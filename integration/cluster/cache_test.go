package cluster

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"damselfly/rafs"
)

// Scenario 6: a node cache smaller than the image, then deleted by hand
// under a live mount and peer: no read fails, and eviction keeps the cache
// under its capacity.
func TestNodeCacheFilledAndDeleted(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	const capacity = 3 << 20 // the image's chunks take about 9 MiB
	n := c.addNodeWithCache("a", "", capacity)
	// A small memory cache, so that reads after the deletion reach the
	// node cache and the peer, not chunks the mount daemon kept.
	m := n.mount(im, "memory_bytes: 1048576\n")

	m.equalSource(im)
	size := dirBytes(t, n.cache)
	t.Logf("measured: node cache after reading the image: %d bytes, capacity %d", size, capacity)
	if size > capacity {
		t.Errorf("node cache holds %d bytes, over its capacity of %d", size, capacity)
	}

	// The peer and the mount may be writing into it: like an operator's
	// rm -rf, try until the tree is gone.
	deadline := time.Now().Add(20 * time.Second)
	for err := os.RemoveAll(n.cache); err != nil; err = os.RemoveAll(n.cache) {
		if time.Now().After(deadline) {
			t.Fatalf("remove %s: %v", n.cache, err)
		}
	}
	dropPageCache(t)
	m.equalSource(im)
	st := m.status()
	size = dirBytes(t, n.cache)
	t.Logf("measured: after deleting the cache and reading again: %d read errors, %d bytes fetched again through the peer, cache %d bytes",
		st.Errors, st.Backend["proxy"], size)
	if st.Errors != 0 {
		t.Errorf("mount had %d read errors, want none", st.Errors)
	}
	if size > capacity {
		t.Errorf("node cache holds %d bytes, over its capacity of %d", size, capacity)
	}
	if size == 0 {
		t.Errorf("nothing was cached again after the deletion")
	}
}

// dirBytes sums the sizes of the regular files under dir (0 if it does
// not exist).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// dropPageCache makes the kernel forget cached file pages, so that reads
// of a mount reach its daemon again.
func dropPageCache(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		t.Fatalf("drop page cache: %v", err)
	}
}
