package cache

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"strings"
	"testing"

	"damselfly/rafs"
)

// storedChunk is makeChunk with a digest of its stored bytes
// (rafs.DigestStoredBlake3).
func storedChunk(seed uint64, n int, compressed bool) testChunk {
	tc := makeChunk(seed, n, compressed)
	tc.ck.Flags |= rafs.ChunkStoredDigest
	tc.ck.Digest = rafs.StoredSum(compressed, tc.stored)
	return tc
}

// TestStoredDigestEntries: a blake3-stored chunk is put, found and read
// under its own key and name (.b3s, version 3); the same 32 bytes under
// BLAKE3 are another entry; ReadChunk checks the stored bytes, so an
// entry rewritten with a consistent CRC is corrupt, deleted and a miss.
func TestStoredDigestEntries(t *testing.T) {
	t.Parallel()
	for _, compressed := range []bool{false, true} {
		name := "raw"
		if compressed {
			name = "compressed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, hot := range []int64{0, 8 << 20} {
				c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = hot; return cc }())
				tc := storedChunk(41, 48<<10, compressed)
				k := KeyOf(tc.ck)
				if k.Algo != rafs.DigestStoredBlake3 || !strings.HasPrefix(k.String(), "blake3-stored:") {
					t.Fatalf("key %s, want algorithm blake3-stored", k)
				}
				if err := c.PutChunk(tc.ck, tc.stored); err != nil {
					t.Fatalf("PutChunk: %v", err)
				}
				if !strings.HasSuffix(c.paths.entry(k), storedSuffix) {
					t.Errorf("entry path %s does not end in %s", c.paths.entry(k), storedSuffix)
				}
				raw, err := os.ReadFile(c.paths.entry(k))
				if err != nil {
					t.Fatal(err)
				}
				if v := binary.LittleEndian.Uint16(raw[offVersion:]); v != version3 {
					t.Errorf("entry version %d, want %d", v, version3)
				}
				dst := make([]byte, tc.ck.Size)
				if err := c.ReadChunk(tc.ck, dst); err != nil || !bytes.Equal(dst, tc.data) {
					t.Fatalf("hot %d: ReadChunk: %v", hot, err)
				}
				m, got, err := c.Get(k, nil)
				if err != nil || !bytes.Equal(got, tc.stored) || m.Compressed != compressed {
					t.Fatalf("Get: %+v, %d bytes, %v", m, len(got), err)
				}
				// The same 32 bytes as a BLAKE3 digest: a miss, then
				// an entry of its own beside this one.
				b3 := tc.ck
				b3.Flags = b3.Flags&^rafs.ChunkStoredDigest | rafs.ChunkBlake3
				wantNotFound(t, "ReadChunk under blake3", c.ReadChunk(b3, dst))
				other := makeChunk(42, 1000, false)
				mustPut(t, c, KeyOf(b3), other.meta(), other.stored)
				if _, got, err := c.Get(KeyOf(b3), nil); err != nil || !bytes.Equal(got, other.stored) {
					t.Fatalf("Get under blake3: %d bytes, %v", len(got), err)
				}
				if _, got, err := c.Get(k, nil); err != nil || !bytes.Equal(got, tc.stored) {
					t.Fatalf("Get under blake3-stored after the blake3 put: %d bytes, %v", len(got), err)
				}
				if s := c.Stats(); s.Corrupt != 0 {
					t.Errorf("Corrupt %d, want 0", s.Corrupt)
				}
			}
		})
	}
}

// TestStoredDigestEntryRewritten: stored bytes changed under a
// consistent payload CRC fail ReadChunk's check of the stored digest.
func TestStoredDigestEntryRewritten(t *testing.T) {
	t.Parallel()
	for _, compressed := range []bool{false, true} {
		c := openTest(t, Default(""))
		tc := storedChunk(43, 32<<10, compressed)
		k := KeyOf(tc.ck)
		if err := c.PutChunk(tc.ck, tc.stored); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(c.paths.entry(k))
		if err != nil {
			t.Fatal(err)
		}
		b[headerSize+len(tc.stored)/2] ^= 0x10
		binary.LittleEndian.PutUint32(b[offPayloadCRC:], crc32.Checksum(b[headerSize:], castagnoli))
		resum(b)
		writeFile(t, c.paths.entry(k), b)
		wantNotFound(t, "ReadChunk of a rewritten entry", c.ReadChunk(tc.ck, make([]byte, tc.ck.Size)))
		if s := c.Stats(); s.Corrupt != 1 {
			t.Errorf("compressed %v: Corrupt %d, want 1", compressed, s.Corrupt)
		}
		if exists(c.paths.entry(k)) {
			t.Errorf("compressed %v: the rewritten entry was not deleted", compressed)
		}
	}
}

// TestStoredDigestNotAdopted: the legacy adoption is BLAKE3's only; a
// blake3-stored read never looks at the bare-hex entry.
func TestStoredDigestNotAdopted(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tc := storedChunk(44, 4096, false)
	// A version 1 entry at the bare-hex name, whose bytes would verify.
	mustPut(t, c, SHA256(tc.ck.Digest), tc.meta(), tc.stored)
	wantNotFound(t, "ReadChunk", c.ReadChunk(tc.ck, make([]byte, tc.ck.Size)))
	if !c.Has(SHA256(tc.ck.Digest)) || c.Has(KeyOf(tc.ck)) {
		t.Error("a blake3-stored read moved the bare-hex entry")
	}
}
