package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"damselfly/rafs/rafstest"
)

// TestNoSpace fills a 1 MiB tmpfs: Put must report ErrNoSpace and leave
// nothing partial behind, and the cache must keep working, with direct
// I/O and without.
func TestNoSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		rafstest.SkipOrFail(t, "root is required to mount a tmpfs for the ENOSPC test")
	}
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { noSpace(t, direct) })
	}
}

func noSpace(t *testing.T, direct bool) {
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		rafstest.SkipOrFail(t, "mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	dir := filepath.Join(mnt, "cache")
	c := openTestIO(t, func() Config { cc := Default(""); cc.Dir, cc.DirectIO = dir, direct; return cc }())
	if c.Stats().Direct != direct {
		t.Fatalf("Direct: got %v, want %v", c.Stats().Direct, direct)
	}

	// One chunk larger than the filesystem.
	big := makeChunk(1, 1<<20, false)
	err := c.PutChunk(big.ck, big.stored)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Put of 1 MiB into 1 MiB: got %v, want ErrNoSpace", err)
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("got %v, want it to wrap ENOSPC too", err)
	}
	wantNoPartialFiles(t, dir, 0, direct)

	// Smaller chunks until the disk is full.
	var stored int
	for i := range 20 {
		tc := makeChunk(uint64(10+i), 300<<10, false)
		err := c.PutChunk(tc.ck, tc.stored)
		if err == nil {
			stored++
			continue
		}
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("Put %d: got %v, want ErrNoSpace", i, err)
		}
		break
	}
	if stored == 0 || stored == 20 {
		t.Fatalf("stored %d chunks of 300 KiB in 1 MiB, want some but not all", stored)
	}
	wantNoPartialFiles(t, dir, stored, direct)
	if s := c.Stats(); s.Entries != stored || s.Errors != 2 {
		t.Errorf("stats: got %+v, want %d entries, 2 errors", s, stored)
	}

	// What was stored still reads; after a Remove, a Put fits again.
	ds := c.Keys()
	for _, d := range ds {
		if _, _, err := c.Get(d, nil); err != nil {
			t.Errorf("Get %s: %v", d, err)
		}
	}
	if err := c.Remove(ds[0]); err != nil {
		t.Fatal(err)
	}
	small := makeChunk(99, 200<<10, false)
	if err := c.PutChunk(small.ck, small.stored); err != nil {
		t.Errorf("Put after Remove: %v", err)
	}
}

// wantNoPartialFiles checks that dir holds n entries of 300 KiB, each
// whole, and no temp files: n entry files with direct I/O, else packs of
// n records and nothing more (what failed writes took is given back).
func wantNoPartialFiles(t *testing.T, dir string, n int, direct bool) {
	t.Helper()
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
	if !direct {
		var total, want int64
		packs := packFiles(t, dir)
		for _, size := range packs {
			total += size
		}
		want = int64(len(packs))*packHeaderSize + int64(n)*(headerSize+300<<10)
		if total != want {
			t.Errorf("packs %v: %d bytes, want %d for %d records", packs, total, want, n)
		}
		return
	}
	files := entryFiles(t, dir)
	if len(files) != n {
		t.Errorf("got %d entry files, want %d", len(files), n)
	}
	for path, size := range files {
		if size != headerSize+300<<10 {
			t.Errorf("%s: %d bytes, want %d", path, size, headerSize+300<<10)
		}
	}
}
