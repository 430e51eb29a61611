package cache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"damselfly/rafs"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		chunk testChunk
		dst   []byte
	}{
		{"raw", makeChunk(1, 64<<10, false), nil},
		{"compressed", makeChunk(2, 1<<20, true), nil},
		{"empty", makeChunk(3, 0, false), nil},
		{"into a large dst", makeChunk(4, 4096, false), make([]byte, 10, 8192)},
		{"into a small dst", makeChunk(5, 4096, false), make([]byte, 10)},
		{"one aligned block", makeChunk(6, 4096-headerSize, false), nil},
		{"one byte over a block", makeChunk(7, 4097-headerSize, false), nil},
		{"largest", makeChunk(8, rafs.MaxChunkSize, false), nil},
	}
	for _, tt := range tests {
		for _, mode := range []string{"direct", "entry files", "packs"} {
			t.Run(fmt.Sprintf("%s/%s", tt.name, mode), func(t *testing.T) {
				t.Parallel()
				cc := Default("")
				cc.DirectIO, cc.entryFiles = mode == "direct", mode == "entry files"
				var dst []byte // each subtest its own: they run in parallel
				if tt.dst != nil {
					dst = make([]byte, len(tt.dst), cap(tt.dst))
				}
				roundTrip(t, openTestIO(t, cc), tt.chunk, dst, mode == "direct")
			})
		}
	}
}

// roundTrip puts tc in c and reads it back every way (Get into dst, then
// ReadChunk), checking bytes, metadata, counters and the file's length.
func roundTrip(t *testing.T, c *Cache, tc testChunk, dst []byte, direct bool) {
	t.Helper()
	d := tc.ckKey()
	if c.Has(d) {
		t.Fatal("Has before Put: got true")
	}
	_, _, err := c.Get(d, nil)
	wantNotFound(t, "Get before Put", err)
	mustPut(t, c, d, tc.meta(), tc.stored)
	if !c.Has(d) {
		t.Fatal("Has after Put: got false")
	}
	m, got, err := c.Get(d, dst)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if m != tc.meta() {
		t.Errorf("meta: got %+v, want %+v", m, tc.meta())
	}
	if !bytes.Equal(got, tc.stored) {
		t.Errorf("stored bytes differ: got %d bytes, want %d", len(got), len(tc.stored))
	}
	if cap(dst) >= len(got) && len(got) > 0 && &got[0] != &dst[:1][0] {
		t.Error("Get did not reuse dst's capacity")
	}
	content := make([]byte, tc.ck.Size)
	if err := c.ReadChunk(tc.ck, content); err != nil {
		t.Fatalf("ReadChunk: %v", err)
	}
	if !bytes.Equal(content, tc.data) {
		t.Error("ReadChunk: content differs")
	}
	s := c.Stats()
	want := Stats{Entries: 1, Bytes: headerSize + int64(len(tc.stored)), Hits: 2, Misses: 1, Puts: 1, Direct: direct}
	inPacks := !direct && !c.cfg.entryFiles
	if inPacks {
		want.Packs = 1
	}
	if s != want {
		t.Errorf("stats: got %+v, want %+v", s, want)
	}
	if !inPacks {
		if fi, err := os.Stat(c.paths.entry(d)); err != nil || fi.Size() != want.Bytes {
			t.Errorf("entry file: %v, %v; want %d bytes", fi, err, want.Bytes)
		}
		return
	}
	if fs := entryFiles(t, c.cfg.Dir); len(fs) != 0 {
		t.Errorf("entry files written beside the pack: %v", fs)
	}
	packs := packFiles(t, c.cfg.Dir)
	if len(packs) != 1 || packs[c.packNameOf(d)] != packHeaderSize+want.Bytes {
		t.Errorf("packs %v, want one of %d bytes holding %s", packs, packHeaderSize+want.Bytes, d)
	}
}

func TestPutRejectsInconsistentMeta(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tests := []struct {
		name   string
		meta   Meta
		stored []byte
	}{
		{"length differs", rawMeta(10), make([]byte, 9)},
		{"raw sizes differ", Meta{Size: 20, StoredSize: 10}, make([]byte, 10)},
		{"too large", rawMeta(rafs.MaxChunkSize + 1), make([]byte, rafs.MaxChunkSize+1)},
		{"compressed empty", Meta{Compressed: true, Size: 10}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.Put(fakeDigest(1), tt.meta, tt.stored); err == nil {
				t.Fatal("got nil, want an error")
			}
			if n := len(entryFiles(t, c.cfg.Dir)) + len(tempFiles(t, c.cfg.Dir)); n != 0 {
				t.Fatalf("got %d files, want none", n)
			}
		})
	}
}

func TestPutTwiceAndRemove(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	d, stored := fakeDigest(1), content(1, 1000)
	mustPut(t, c, d, rawMeta(1000), stored)
	mustPut(t, c, d, rawMeta(1000), stored)
	if s := c.Stats(); s.Entries != 1 || s.Bytes != headerSize+1000 || s.Puts != 2 {
		t.Errorf("stats after two puts: got %+v, want 1 entry of %d bytes, 2 puts", s, headerSize+1000)
	}
	if err := c.Remove(d); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := c.Remove(d); err != nil {
		t.Fatalf("Remove again: got %v, want nil", err)
	}
	_, _, err := c.Get(d, nil)
	wantNotFound(t, "Get after Remove", err)
	if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
		t.Errorf("stats after Remove: got %+v, want empty", s)
	}
}

func TestReopenScansEntries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := openTest(t, Default(dir))
	var want []Key
	for i := range uint64(20) {
		d := fakeDigest(i)
		mustPut(t, c, d, rawMeta(100), content(i, 100))
		want = append(want, d)
	}
	c.Close()

	c2 := openTest(t, Default(dir))
	got := c2.Keys()
	slices.SortFunc(got, func(a, b Key) int { return bytes.Compare(a.Digest[:], b.Digest[:]) })
	slices.SortFunc(want, func(a, b Key) int { return bytes.Compare(a.Digest[:], b.Digest[:]) })
	if !slices.Equal(got, want) {
		t.Errorf("digests after reopen: got %d, want %d", len(got), len(want))
	}
	if s := c2.Stats(); s.Bytes != 20*(headerSize+100) {
		t.Errorf("bytes after reopen: got %d, want %d", s.Bytes, 20*(headerSize+100))
	}
	for i, d := range want {
		if _, _, err := c2.Get(d, nil); err != nil {
			t.Fatalf("Get %d after reopen: %v", i, err)
		}
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	d := fakeDigest(1)
	mustPut(t, c, d, rawMeta(10), make([]byte, 10))
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := c.Get(d, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Get: got %v, want ErrClosed", err)
	}
	if err := c.Put(d, rawMeta(10), make([]byte, 10)); !errors.Is(err, ErrClosed) {
		t.Errorf("Put: got %v, want ErrClosed", err)
	}
	if err := c.Rescan(); !errors.Is(err, ErrClosed) {
		t.Errorf("Rescan: got %v, want ErrClosed", err)
	}
	if c.Has(d) || c.Keys() != nil {
		t.Error("Has or Digests after Close: want false and nil")
	}
	if s := c.Stats(); s.Puts != 1 {
		t.Errorf("Stats after Close: got %+v, want 1 put", s)
	}
}
