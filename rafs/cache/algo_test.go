package cache

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"damselfly/rafs"
)

// flipAlgo returns ck described with the other digest algorithm and the
// same 32 bytes of digest: a request that names a stored chunk under the
// wrong algorithm.
func flipAlgo(ck rafs.Chunk) rafs.Chunk {
	ck.Flags ^= rafs.ChunkBlake3
	return ck
}

// blake3Chunk is makeChunk with a BLAKE3 digest.
func blake3Chunk(seed uint64, n int, compressed bool) testChunk {
	tc := makeChunk(seed, n, compressed)
	tc.ck.Flags |= rafs.ChunkBlake3
	tc.ck.Digest = rafs.DigestBlake3.Sum(tc.data)
	return tc
}

// TestReadChunkOtherAlgorithmMisses: a chunk cached under one digest
// algorithm and read under the other (same 32 bytes of digest) is a miss,
// and the good entry stays: not deleted, not counted corrupt, still read
// under its own algorithm. It uses only the API of the release before,
// which deleted the entry as corrupt.
func TestReadChunkOtherAlgorithmMisses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		tc   testChunk
	}{
		{"sha256 cached, read as blake3", makeChunk(11, 32<<10, false)},
		{"sha256 compressed cached, read as blake3", makeChunk(12, 32<<10, true)},
		{"blake3 cached, read as sha256", blake3Chunk(13, 32<<10, false)},
		{"blake3 compressed cached, read as sha256", blake3Chunk(14, 32<<10, true)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, hot := range []int64{0, 8 << 20} {
				c := openTest(t, func() Config { cc := Default(""); cc.HotBytes = hot; return cc }())
				if err := c.PutChunk(tt.tc.ck, tt.tc.stored); err != nil {
					t.Fatalf("PutChunk: %v", err)
				}
				dst := make([]byte, tt.tc.ck.Size)
				err := c.ReadChunk(flipAlgo(tt.tc.ck), dst)
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("hot %d: ReadChunk under the other algorithm: got %v, want ErrNotFound", hot, err)
				}
				if s := c.Stats(); s.Corrupt != 0 {
					t.Errorf("hot %d: Corrupt: got %d, want 0", hot, s.Corrupt)
				}
				if err := c.ReadChunk(tt.tc.ck, dst); err != nil {
					t.Fatalf("hot %d: ReadChunk under its own algorithm after the flipped read: %v", hot, err)
				}
				if !bytes.Equal(dst, tt.tc.data) {
					t.Fatalf("hot %d: content differs", hot)
				}
			}
		})
	}
}

// TestKeyIsAlgorithmAndDigest: Get, Has and Remove under the other
// algorithm miss and touch nothing; the two keys of one digest are two
// entries, side by side.
func TestKeyIsAlgorithmAndDigest(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tc := makeChunk(21, 4096, false)
	sha := KeyOf(tc.ck)
	b3 := Key{Algo: rafs.DigestBlake3, Digest: sha.Digest}
	mustPut(t, c, sha, tc.meta(), tc.stored)
	if c.Has(b3) {
		t.Error("Has under blake3: got true for a sha256 entry")
	}
	_, _, err := c.Get(b3, nil)
	wantNotFound(t, "Get under blake3", err)
	if err := c.Remove(b3); err != nil {
		t.Fatalf("Remove under blake3: %v", err)
	}
	if !c.Has(sha) {
		t.Fatal("the sha256 entry went with a blake3 Remove")
	}
	// Bytes Put trusts; another entry for the other key.
	other := makeChunk(22, 2048, false)
	mustPut(t, c, b3, other.meta(), other.stored)
	for _, x := range []struct {
		k    Key
		want []byte
	}{{sha, tc.stored}, {b3, other.stored}} {
		_, got, err := c.Get(x.k, nil)
		if err != nil || !bytes.Equal(got, x.want) {
			t.Errorf("Get %s: got %d bytes, %v; want its own %d bytes", x.k, len(got), err, len(x.want))
		}
	}
	if got, want := c.paths.entry(b3), c.paths.entry(sha)+blake3Suffix; got != want {
		t.Errorf("blake3 entry path: got %s, want %s", got, want)
	}
	// Reopened, the scan finds both under their keys.
	c.Close()
	c2 := openTest(t, Default(c.cfg.Dir))
	keys := c2.Keys()
	if len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("keys after reopen: got %v, want %s and %s", keys, sha, b3)
	}
	for _, k := range keys {
		if k != sha && k != b3 {
			t.Errorf("key after reopen: got %s", k)
		}
	}
}

// TestBlake3EntryUnderSHA256Name: an entry file whose header names the
// other algorithm than its file name is corrupt (deleted on read), like
// one that names another digest.
func TestBlake3EntryUnderSHA256Name(t *testing.T) {
	t.Parallel()
	c := openTest(t, Default(""))
	tc := blake3Chunk(31, 4096, false)
	k := KeyOf(tc.ck)
	mustPut(t, c, k, tc.meta(), tc.stored)
	sha := SHA256(k.Digest)
	b, err := os.ReadFile(c.paths.entry(k))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, c.paths.entry(sha), b)
	_, _, err = c.Get(sha, nil)
	wantNotFound(t, "Get of a blake3 header under a sha256 name", err)
	if exists(c.paths.entry(sha)) {
		t.Error("the mislabelled file was not deleted")
	}
	if !c.Has(k) {
		t.Error("the blake3 entry went too")
	}
}

// An entry the release before wrote for a BLAKE3 chunk (version 1, at the
// bare-hex name) is found by a BLAKE3 read, moved to its own name and
// served; a SHA-256 entry read under BLAKE3 is not (the other tests).
func TestLegacyBlake3EntryAdopted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		read func(c *Cache, tc testChunk) error
	}{
		{"Get", func(c *Cache, tc testChunk) error {
			m, got, err := c.Get(KeyOf(tc.ck), nil)
			if err == nil && (!bytes.Equal(got, tc.stored) || m != tc.meta()) {
				return errors.New("other bytes")
			}
			return err
		}},
		{"ReadChunk", func(c *Cache, tc testChunk) error {
			dst := make([]byte, tc.ck.Size)
			if err := c.ReadChunk(tc.ck, dst); err != nil {
				return err
			}
			if !bytes.Equal(dst, tc.data) {
				return errors.New("other content")
			}
			return nil
		}},
	} {
		for _, compressed := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				c := openTest(t, Default(""))
				tc := blake3Chunk(41, 8192, compressed)
				legacy := SHA256(tc.ck.Digest) // where the release before put it
				mustPut(t, c, legacy, tc.meta(), tc.stored)
				if err := tt.read(c, tc); err != nil {
					t.Fatalf("BLAKE3 read of a legacy entry: %v", err)
				}
				if !c.Has(KeyOf(tc.ck)) || c.Has(legacy) {
					t.Errorf("after the read: BLAKE3 entry %v, legacy file %v; want true, false", c.Has(KeyOf(tc.ck)), c.Has(legacy))
				}
				if s := c.Stats(); s.Corrupt != 0 {
					t.Errorf("Corrupt: got %d, want 0", s.Corrupt)
				}
			})
		}
	}
}
