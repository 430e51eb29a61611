package cache

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"damselfly/rafs"
)

func TestCorruptEntries(t *testing.T) {
	t.Parallel()
	tc := makeChunk(1, 8192, false)
	other := makeChunk(2, 8192, false)
	le := binary.LittleEndian
	tests := []struct {
		name string
		// damage changes the good entry file at path (other's entry is at
		// otherPath).
		damage func(t *testing.T, path, otherPath string)
	}{
		{"payload byte flipped", func(t *testing.T, path, _ string) { flip(t, path, headerSize+100) }},
		{"header byte flipped", func(t *testing.T, path, _ string) { flip(t, path, offSize) }},
		{"digest byte flipped", func(t *testing.T, path, _ string) { flip(t, path, offDigest) }},
		{"truncated", func(t *testing.T, path, _ string) { truncate(t, path, headerSize+4000) }},
		{"truncated into the header", func(t *testing.T, path, _ string) { truncate(t, path, 10) }},
		{"empty", func(t *testing.T, path, _ string) { truncate(t, path, 0) }},
		{"extended", func(t *testing.T, path, _ string) { truncate(t, path, headerSize+8192+1) }},
		{"garbage header with a huge size", func(t *testing.T, path, _ string) {
			b := readFile(t, path)
			le.PutUint16(b[offFlags:], flagCompressed)
			le.PutUint32(b[offStoredSize:], 0xfffffff0)
			resum(b)
			writeFile(t, path, b)
		}},
		{"consistent header, huge size", func(t *testing.T, path, _ string) {
			// A header that passes every check but claims 16 MiB the file
			// does not have.
			b := readFile(t, path)
			le.PutUint32(b[offSize:], rafs.MaxChunkSize)
			le.PutUint32(b[offStoredSize:], rafs.MaxChunkSize)
			resum(b)
			writeFile(t, path, b)
		}},
		{"random bytes", func(t *testing.T, path, _ string) { writeFile(t, path, content(9, 5000)) }},
		{"another entry's file", func(t *testing.T, path, otherPath string) {
			writeFile(t, path, readFile(t, otherPath))
		}},
		{"symlink", func(t *testing.T, path, otherPath string) {
			os.Remove(path)
			if err := os.Symlink(otherPath, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, path, _ string) {
			os.Remove(path)
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := openTest(t, Default(""))
			mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
			mustPut(t, c, KeyOf(other.ck), other.meta(), other.stored)
			path := c.paths.entry(KeyOf(tc.ck))
			tt.damage(t, path, c.paths.entry(KeyOf(other.ck)))

			_, _, err := c.Get(KeyOf(tc.ck), nil)
			wantNotFound(t, "Get", err)
			if exists(path) {
				t.Error("corrupt entry still exists")
			}
			if s := c.Stats(); s.Corrupt != 1 || s.Misses != 1 || s.Hits != 0 || s.Entries != 1 {
				t.Errorf("stats: got %+v, want 1 corrupt, 1 miss, 1 entry left", s)
			}
			if _, got, err := c.Get(KeyOf(other.ck), nil); err != nil || !bytes.Equal(got, other.stored) {
				t.Errorf("the other entry: got %v, want it intact", err)
			}
			// The chunk can be stored again.
			mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
			if _, got, err := c.Get(KeyOf(tc.ck), nil); err != nil || !bytes.Equal(got, tc.stored) {
				t.Errorf("Get after Put again: %v", err)
			}
		})
	}
}

func TestScanDeletesImpossibleSizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := openTest(t, Default(dir))
	good, small, big := fakeDigest(1), fakeDigest(2), fakeDigest(3)
	mustPut(t, c, good, rawMeta(100), content(1, 100))
	c.Close()
	p := newPaths(dir)
	for _, d := range []Key{small, big} {
		os.MkdirAll(p.shard(d), 0o755)
	}
	writeFile(t, p.entry(small), make([]byte, headerSize-1))
	writeFile(t, p.entry(big), nil)
	truncate(t, p.entry(big), maxEntrySize+1) // sparse
	stranger := filepath.Join(p.chunks, "README")
	writeFile(t, stranger, []byte("not ours"))

	c2 := openTest(t, Default(dir))
	if s := c2.Stats(); s.Entries != 1 || s.Corrupt != 2 {
		t.Errorf("stats: got %+v, want 1 entry, 2 corrupt", s)
	}
	if exists(p.entry(small)) || exists(p.entry(big)) {
		t.Error("files of impossible sizes survived the scan")
	}
	if !exists(stranger) {
		t.Error("the scan deleted a file that is not an entry")
	}
}

// FuzzGetHostileFile puts arbitrary bytes where an entry file belongs: Get
// must return them only if they are a valid entry, and never panic.
func FuzzGetHostileFile(f *testing.F) {
	var b [headerSize]byte
	encodeHeader(&b, header{key: fakeDigest(1), meta: rawMeta(4)})
	f.Add(b[:])
	f.Add(append(b[:], 1, 2, 3, 4))
	f.Add([]byte("DFLYCHNK"))
	dir := f.TempDir()
	cfg := Default(dir)
	cfg.entryFiles = true // where an earlier release, or direct I/O, puts entries
	c, err := Open(cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	path := c.paths.entry(fakeDigest(1))
	os.MkdirAll(filepath.Dir(path), 0o755)
	f.Fuzz(func(t *testing.T, in []byte) {
		writeFile(t, path, in)
		m, got, err := c.Get(fakeDigest(1), nil)
		if err != nil {
			wantNotFound(t, "Get", err)
			if exists(path) {
				t.Fatal("rejected file not deleted")
			}
			return
		}
		if len(in) != headerSize+int(m.StoredSize) || !bytes.Equal(got, in[headerSize:]) {
			t.Fatalf("Get returned %d bytes with %+v from a %d-byte file", len(got), m, len(in))
		}
	})
}

func flip(t *testing.T, path string, off int) {
	t.Helper()
	b := readFile(t, path)
	b[off] ^= 0x40
	writeFile(t, path, b)
}

func truncate(t *testing.T, path string, n int64) {
	t.Helper()
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFile overwrites path in place, as damage by hand or by a disk would.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
