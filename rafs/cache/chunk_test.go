package cache

import (
	"bytes"
	"errors"
	"testing"

	"damselfly/rafs"
)

func TestReadChunk(t *testing.T) {
	t.Parallel()
	raw := makeChunk(1, 64<<10, false)
	zst := makeChunk(1, 64<<10, true) // same content, compressed
	other := makeChunk(2, 64<<10, false)
	tests := []struct {
		name string
		// put stores an entry under the chunk read's digest.
		put       func(c *Cache) error
		read      rafs.Chunk
		wantErr   error // nil: success with read's content
		wantBad   bool  // the entry fails verification: deleted, counted
		wantEntry bool  // the entry exists afterwards
	}{
		{"raw", func(c *Cache) error { return c.PutChunk(raw.ck, raw.stored) }, raw.ck, nil, false, true},
		{"compressed", func(c *Cache) error { return c.PutChunk(zst.ck, zst.stored) }, zst.ck, nil, false, true},
		{"cached raw, read as compressed", func(c *Cache) error { return c.PutChunk(raw.ck, raw.stored) }, zst.ck, nil, false, true},
		{"cached compressed, read as raw", func(c *Cache) error { return c.PutChunk(zst.ck, zst.stored) }, raw.ck, nil, false, true},
		{"absent", func(c *Cache) error { return nil }, raw.ck, ErrNotFound, false, false},
		{"wrong payload", func(c *Cache) error {
			return c.Put(KeyOf(raw.ck), other.meta(), other.stored)
		}, raw.ck, ErrNotFound, true, false},
		{"wrong compressed payload", func(c *Cache) error {
			bad := append([]byte(nil), zst.stored...)
			bad[len(bad)/2] ^= 1
			return c.Put(KeyOf(zst.ck), zst.meta(), bad)
		}, zst.ck, ErrNotFound, true, false},
		{"not zstd", func(c *Cache) error {
			return c.Put(KeyOf(zst.ck), Meta{Compressed: true, Size: zst.ck.Size, StoredSize: 100}, make([]byte, 100))
		}, zst.ck, ErrNotFound, true, false},
		{"wrong size", func(c *Cache) error {
			return c.Put(KeyOf(raw.ck), rawMeta(100), make([]byte, 100))
		}, raw.ck, ErrNotFound, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := openTest(t, Default(""))
			if err := tt.put(c); err != nil {
				t.Fatalf("put: %v", err)
			}
			dst := make([]byte, tt.read.Size)
			err := c.ReadChunk(tt.read, dst)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if err == nil && !bytes.Equal(dst, raw.data) {
				t.Error("content differs")
			}
			s := c.Stats()
			if bad := s.Corrupt == 1; bad != tt.wantBad {
				t.Errorf("Corrupt: got %d, want bad entry %v", s.Corrupt, tt.wantBad)
			}
			if got := exists(c.paths.entry(KeyOf(tt.read))); got != tt.wantEntry {
				t.Errorf("entry exists: got %v, want %v", got, tt.wantEntry)
			}
			if tt.wantErr == nil && (s.Hits != 1 || s.Misses != 0) || tt.wantErr != nil && (s.Hits != 0 || s.Misses != 1) {
				t.Errorf("stats: got %+v, want one hit or one miss", s)
			}
		})
	}
}

func TestReadChunkWrongBuffer(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tc := makeChunk(1, 4096, false)
	mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
	err := c.ReadChunk(tc.ck, make([]byte, 10))
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want a buffer error that is not ErrNotFound", err)
	}
	if !exists(c.paths.entry(KeyOf(tc.ck))) {
		t.Error("a caller's mistake deleted a good entry")
	}
}

func TestPutChunkChecksLength(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tc := makeChunk(1, 4096, true)
	if err := c.PutChunk(tc.ck, tc.stored[1:]); err == nil {
		t.Fatal("got nil, want an error for stored bytes shorter than the chunk says")
	}
}
