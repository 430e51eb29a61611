package rafs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"lukechampine.com/blake3"
)

// TestBlake3Digests builds the same layer with each digest algorithm and
// checks what each chunk carries: the superblock's algorithm, the flag on
// every chunk, digests of that algorithm, content that reads back, and
// verification that refuses the other algorithm's digest.
func TestBlake3Digests(t *testing.T) {
	small := []byte("a small file, batched with others\n")
	layer := makeTar(t, []tarEntry{
		{name: "big", data: randBytes(11, 3*MinChunkSize+5)},
		{name: "text", data: bytes.Repeat([]byte("compressible text "), 20000)},
		{name: "small1", data: small},
		{name: "small2", data: randBytes(12, 300)},
	})
	for _, algo := range []DigestAlgo{DigestSHA256, DigestBlake3} {
		t.Run(algo.String(), func(t *testing.T) {
			dir := t.TempDir()
			fsys, _ := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Digest: algo, BlobDir: dir}, layer)
			b := fsys.Bootstrap()
			if b.DigestAlgo() != algo {
				t.Fatalf("bootstrap digest algorithm %s, want %s", b.DigestAlgo(), algo)
			}
			compressed := 0
			for i := range b.ChunkCount() {
				c, err := b.Chunk(i)
				if err != nil {
					t.Fatal(err)
				}
				if c.Algo() != algo || (c.Flags&ChunkBlake3 != 0) != (algo == DigestBlake3) {
					t.Errorf("chunk %d: flags %#x, algorithm %s; want %s", i, c.Flags, c.Algo(), algo)
				}
				if c.Compressed() {
					compressed++
				}
				plain := make([]byte, c.Size)
				src := &BlobChunkSource{Bootstrap: b, Blobs: NewDirBlobs(dir)}
				if err := src.ReadChunk(t.Context(), c, plain); err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				var want Digest
				if algo == DigestBlake3 {
					want = blake3.Sum256(plain)
				} else {
					want = sha256.Sum256(plain)
				}
				if c.Digest != want {
					t.Errorf("chunk %d: digest %x is not the %s of its content", i, c.Digest, algo)
				}
				// The other algorithm's verdict on the same bytes.
				other := c
				other.Flags ^= ChunkBlake3
				if err := src.ReadChunk(t.Context(), other, plain); !errors.Is(err, ErrDigestMismatch) {
					t.Errorf("chunk %d verified as %s: got %v, want a digest mismatch", i, other.Algo(), err)
				}
			}
			if compressed == 0 {
				t.Error("no compressed chunk: the test covers raw chunks only")
			}
			got, err := fs.ReadFile(fsys, "small1")
			if err != nil || !bytes.Equal(got, small) {
				t.Errorf("small1: got %q, %v", got, err)
			}
		})
	}
}

// TestBlake3FlagMustMatchSuperblock: a chunk whose flag disagrees with
// the superblock's algorithm, or a superblock naming an unknown one, is
// corruption.
func TestBlake3FlagMustMatchSuperblock(t *testing.T) {
	layer := makeTar(t, []tarEntry{{name: "f", data: randBytes(13, 1000)}})
	_, res := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Digest: DigestBlake3}, layer)
	b, err := Decode(res.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	idx := bytes.Index(res.Bootstrap, b.record(secChunks, 0))
	if idx < 0 {
		t.Fatal("chunk record not found")
	}
	flagOff := append([]byte(nil), res.Bootstrap...)
	f := binary.LittleEndian.Uint32(flagOff[idx+36:])
	binary.LittleEndian.PutUint32(flagOff[idx+36:], f&^ChunkBlake3)
	nb, err := Decode(reseal(flagOff), OpenOptions{})
	if err == nil {
		_, err = nb.Chunk(0)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "digest") {
		t.Errorf("chunk without the flag in a blake3 bootstrap: got %v, want ErrCorrupt", err)
	}
	unknown := append([]byte(nil), res.Bootstrap...)
	unknown[21] = 9
	if _, err := Decode(reseal(unknown), OpenOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("digest algorithm 9: got %v, want ErrCorrupt", err)
	}
}

// TestDictMustShareDigest: a chunk dictionary of the other algorithm
// could never match a chunk; the build says so instead of storing all.
func TestDictMustShareDigest(t *testing.T) {
	layer := makeTar(t, []tarEntry{{name: "f", data: randBytes(14, 3*MinChunkSize)}})
	_, res := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Digest: DigestSHA256}, layer)
	dict, err := Decode(res.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(t.Context(), layersOf(layer), BuildOptions{ChunkSize: MinChunkSize, Digest: DigestBlake3, Dict: dict, BlobDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("blake3 build with a sha256 dictionary: got %v, want an error about digests", err)
	}
	if _, err := ParseDigestAlgo("md5"); err == nil {
		t.Error("ParseDigestAlgo(md5): no error")
	}
	for _, a := range []DigestAlgo{DigestSHA256, DigestBlake3} {
		if got, err := ParseDigestAlgo(a.String()); err != nil || got != a {
			t.Errorf("ParseDigestAlgo(%q) = %v, %v", a, got, err)
		}
	}
}

// reseal writes bad's checksum into it, so that a test's edit reaches
// the decoder's structural checks, and returns bad.
func reseal(bad []byte) []byte {
	sum := checksum(bad)
	copy(bad[40:72], sum[:])
	return bad
}
