package cache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCrashLeftovers simulates writers that died mid-write: their temp
// files must never be visible as entries, and Open deletes only those old
// enough that no live writer can own them.
func TestCrashLeftovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newPaths(dir)
	stale, fresh, torn := fakeDigest(1), fakeDigest(2), fakeDigest(3)
	tc := makeChunk(4, 4096, false)

	// A complete entry image, written the way a crashed writer would have
	// left it: only in a temp file.
	var hb [headerSize]byte
	encodeHeader(&hb, header{key: stale, meta: rawMeta(4096)})
	tempOf := func(d Key, suffix string) string {
		os.MkdirAll(p.shard(d), 0o755)
		return p.entry(d)[:len(p.entry(d))-64] + tempPrefix + filepath.Base(p.entry(d)) + "-" + suffix
	}
	staleTemp := tempOf(stale, "dead")
	writeFile(t, staleTemp, append(hb[:], tc.stored...))
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(staleTemp, old, old); err != nil {
		t.Fatal(err)
	}
	freshTemp := tempOf(fresh, "live")
	writeFile(t, freshTemp, hb[:10])
	// An entry torn by a power loss after its rename: the name exists but
	// the data never reached the disk.
	os.MkdirAll(p.shard(torn), 0o755)
	writeFile(t, p.entry(torn), nil)

	c := openTest(t, Default(dir))
	if exists(staleTemp) {
		t.Error("stale temp file survived Open")
	}
	if !exists(freshTemp) {
		t.Error("Open deleted a temp file a live writer may own")
	}
	if exists(p.entry(torn)) {
		t.Error("torn entry survived Open")
	}
	for name, d := range map[string]Key{"stale": stale, "fresh": fresh, "torn": torn} {
		_, _, err := c.Get(d, nil)
		wantNotFound(t, "Get "+name, err)
		if c.Has(d) {
			t.Errorf("Has %s: got true", name)
		}
	}
	if got := c.Keys(); len(got) != 0 {
		t.Errorf("Digests: got %d, want none", len(got))
	}
	if s := c.Stats(); s.Corrupt != 1 {
		t.Errorf("Corrupt: got %d, want 1 (the torn entry)", s.Corrupt)
	}

	// The live writer finishes later; a rescan once it is old removes it.
	if err := os.Chtimes(freshTemp, old, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Rescan(); err != nil {
		t.Fatalf("Rescan: %v", err)
	}
	if left := tempFiles(t, dir); len(left) != 0 {
		t.Errorf("temp files after Rescan: %v", left)
	}
}
