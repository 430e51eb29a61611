package cache

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"damselfly/rafs/rafstest"
)

func TestAlignedBuf(t *testing.T) {
	t.Parallel()
	for _, n := range []int{directAlign, 2 * directAlign, 1<<20 + directAlign, alignUp(maxEntrySize)} {
		b := alignedBuf(n)
		if len(b) != n || cap(b) != n {
			t.Errorf("alignedBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%directAlign != 0 {
			t.Errorf("alignedBuf(%d) starts at %#x, not a multiple of %d", n, p, directAlign)
		}
	}
	for n, want := range map[int]int{0: 0, 1: directAlign, directAlign: directAlign, directAlign + 1: 2 * directAlign} {
		if got := alignUp(n); got != want {
			t.Errorf("alignUp(%d) = %d, want %d", n, got, want)
		}
	}
}

// Processes sharing a directory may differ in their I/O: entries written
// with direct I/O read back buffered, and the other way round, and each
// sees the other's deletions.
func TestDirectSharedWithBuffered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	direct := openTestIO(t, func() Config { cc := Default(""); cc.Dir, cc.DirectIO = dir, true; return cc }())
	buffered := openTestIO(t, Default(dir))
	if !direct.Stats().Direct || buffered.Stats().Direct {
		t.Fatalf("Direct: got %v and %v, want true and false", direct.Stats().Direct, buffered.Stats().Direct)
	}
	chunks := []testChunk{makeChunk(1, 3<<20+17, false), makeChunk(2, 1<<20, true), makeChunk(3, 100, false)}
	for i, tc := range chunks {
		w, r := direct, buffered
		if i%2 == 1 {
			w, r = buffered, direct
		}
		mustPut(t, w, KeyOf(tc.ck), tc.meta(), tc.stored)
		_, got, err := r.Get(KeyOf(tc.ck), nil)
		if err != nil || !bytes.Equal(got, tc.stored) {
			t.Fatalf("chunk %d: Get from the other cache: %d bytes, %v", i, len(got), err)
		}
		content := make([]byte, tc.ck.Size)
		if err := r.ReadChunk(tc.ck, content); err != nil || !bytes.Equal(content, tc.data) {
			t.Fatalf("chunk %d: ReadChunk from the other cache: %v", i, err)
		}
	}
	if err := buffered.Remove(chunks[0].ckKey()); err != nil {
		t.Fatal(err)
	}
	_, _, err := direct.Get(chunks[0].ckKey(), nil)
	wantNotFound(t, "Get after the other cache removed it", err)
	if tf := tempFiles(t, dir); len(tf) != 0 {
		t.Errorf("temp files left: %v", tf)
	}
}

// A file system that refuses direct I/O leaves the cache buffered, and
// working.
func TestDirectRefusedAtOpen(t *testing.T) {
	t.Parallel()
	c := openTestIO(t, Config{DirectIO: true, probeDirect: func(string) bool { return false }})
	if c.Stats().Direct {
		t.Fatal("Direct: got true after the probe said no")
	}
	roundTrip(t, c, makeChunk(1, 5000, false), nil, false)
}

// The probe leaves nothing behind in the directory it probes.
func TestProbeDirectCleansUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if !probeDirect(dir) {
		rafstest.SkipOrFail(t, "the file system under the test's temp dir refuses direct I/O")
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("after the probe: %v, %v", ents, err)
	}
}

// A direct read of an entry whose file no longer matches the length it was
// opened with, or whose bytes were damaged in place, is a miss that
// deletes the entry.
func TestDirectReadDamaged(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tc := makeChunk(1, 9000, false)
	path := c.paths.entry(KeyOf(tc.ck))
	damage := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"payload byte flipped", func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 1
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated by a byte", func(t *testing.T) {
			if err := os.Truncate(path, headerSize+9000-1); err != nil {
				t.Fatal(err)
			}
		}},
		{"grown by a block", func(t *testing.T) {
			if err := os.Truncate(path, headerSize+9000+directAlign); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, dm := range damage {
		mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
		dm.do(t)
		_, _, err := c.Get(KeyOf(tc.ck), nil)
		wantNotFound(t, dm.name, err)
		if exists(path) {
			t.Errorf("%s: the damaged entry is still there", dm.name)
		}
	}
	if got := c.Stats().Corrupt; got != uint64(len(damage)) {
		t.Errorf("Corrupt: got %d, want %d", got, len(damage))
	}
}
