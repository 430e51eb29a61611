package rafs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"lukechampine.com/blake3"
)

// storedLayer has raw chunks (random bytes), compressed ones (text), a
// chunk repeated within a file and across files, and batched small files.
func storedLayer(t testing.TB) []byte {
	text := wordText(34, 300<<10)
	return makeTar(t, []tarEntry{
		{name: "big", data: randBytes(31, 3*MinChunkSize+5)},
		{name: "text", data: text},
		{name: "text-copy", data: text},
		{name: "zeros", data: make([]byte, 3*MinChunkSize)},
		{name: "small1", data: []byte("a small file, batched with others\n")},
		{name: "small2", data: randBytes(32, 300)},
	})
}

// wordText is n bytes of words picked at random: text that compresses
// differently at each zstd level.
func wordText(seed uint64, n int) []byte {
	words := strings.Fields("the quick brown fox jumps over lazy dog chunk digest blob peer mount zstd frame stored bytes image layer")
	r := randBytes(seed, n)
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = append(b, words[int(r[i])%len(words)]...)
		b = append(b, " \n"[r[i]>>7])
	}
	return b[:n]
}

// TestStoredDigests: convert with blake3-stored, then read the image
// through the fs view. Every chunk carries the flag, its digest is
// StoredSum of its bytes in the blob (keyed for a zstd frame), content
// reads back, and identical content is stored once.
func TestStoredDigests(t *testing.T) {
	layer := storedLayer(t)
	dir := t.TempDir()
	fsys, res := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Digest: DigestStoredBlake3, BlobDir: dir}, layer)
	b := fsys.Bootstrap()
	if b.DigestAlgo() != DigestStoredBlake3 {
		t.Fatalf("bootstrap digest algorithm %s, want %s", b.DigestAlgo(), DigestStoredBlake3)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	blobs := NewDirBlobs(dir)
	src := &BlobChunkSource{Bootstrap: b, Blobs: blobs}
	seen := map[Digest]bool{}
	var compressed, raw int
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if c.Algo() != DigestStoredBlake3 || c.Flags&ChunkAlgoFlags != ChunkStoredDigest {
			t.Errorf("chunk %d: flags %#x, algorithm %s; want %s", i, c.Flags, c.Algo(), DigestStoredBlake3)
		}
		if seen[c.Digest] {
			t.Errorf("chunk %d: digest %x stored twice", i, c.Digest)
		}
		seen[c.Digest] = true
		bl, err := b.Blob(c.Blob)
		if err != nil {
			t.Fatal(err)
		}
		stored := make([]byte, c.CompressedSize)
		if err := blobs.ReadBlob(t.Context(), bl, int64(c.CompressedOffset), stored); err != nil {
			t.Fatal(err)
		}
		var want Digest
		if c.Compressed() {
			compressed++
			key := blake3Sum([]byte("damselfly rafs: zstd frame of a chunk, v1"))
			h := blake3.New(32, key[:])
			h.Write(stored)
			want = Digest(h.Sum(nil))
		} else {
			raw++
			want = blake3.Sum256(stored)
		}
		if c.Digest != want {
			t.Errorf("chunk %d (compressed %v): digest %x, want BLAKE3 of its stored bytes %x", i, c.Compressed(), c.Digest, want)
		}
		if err := VerifyChunk(c, stored, nil); err != nil {
			t.Errorf("chunk %d: VerifyChunk: %v", i, err)
		}
		plain := make([]byte, c.Size)
		if err := src.ReadChunk(t.Context(), c, plain); err != nil {
			t.Fatalf("chunk %d: ReadChunk: %v", i, err)
		}
		// The content's BLAKE3 is not the digest of a compressed chunk.
		if c.Compressed() && c.Digest == blake3Sum(plain) {
			t.Errorf("chunk %d: compressed chunk named by its content's BLAKE3", i)
		}
	}
	if compressed == 0 || raw == 0 {
		t.Fatalf("%d compressed and %d raw chunks: the test needs both", compressed, raw)
	}
	// text and text-copy share chunks; zeros is one chunk three times.
	if res.Stats.NewChunks != int(b.ChunkCount()) {
		t.Errorf("%d new chunks for %d records", res.Stats.NewChunks, b.ChunkCount())
	}
	for name, want := range map[string][]byte{
		"text":   wordText(34, 300<<10),
		"zeros":  make([]byte, 3*MinChunkSize),
		"small1": []byte("a small file, batched with others\n"),
		"big":    randBytes(31, 3*MinChunkSize+5),
	} {
		got, err := fs.ReadFile(fsys, name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: got %d bytes, %v; want %d bytes", name, len(got), err, len(want))
		}
	}
	if err := fstest.TestFS(fsys, "big", "text", "text-copy", "zeros", "small1", "small2"); err != nil {
		t.Error(err)
	}
	// Fewer chunks than a build that names chunks by content would be a
	// dedupe lost: the same content must give the same chunk table.
	_, plainRes := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Digest: DigestBlake3}, layer)
	pb, err := Decode(plainRes.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pb.ChunkCount() != b.ChunkCount() {
		t.Errorf("%d chunks with blake3-stored, %d with blake3", b.ChunkCount(), pb.ChunkCount())
	}
}

// TestStoredDigestsDeterministic: the same input and options give the
// same bootstrap and blobs whatever the worker count.
func TestStoredDigestsDeterministic(t *testing.T) {
	layer := storedLayer(t)
	var first *BuildResult
	var firstBlobs [][]byte
	for _, w := range []int{1, 2, 5} {
		dir := t.TempDir()
		res, err := Build(t.Context(), layersOf(layer), BuildOptions{ChunkSize: MinChunkSize, Digest: DigestStoredBlake3, BlobDir: dir, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		var blobs [][]byte
		for _, bl := range res.Blobs {
			data, err := os.ReadFile(BlobPath(dir, bl.Digest))
			if err != nil {
				t.Fatal(err)
			}
			blobs = append(blobs, data)
		}
		if first == nil {
			first, firstBlobs = res, blobs
			continue
		}
		if !bytes.Equal(first.Bootstrap, res.Bootstrap) {
			t.Fatalf("workers=%d: bootstrap differs", w)
		}
		if len(blobs) != len(firstBlobs) {
			t.Fatalf("workers=%d: %d blobs, want %d", w, len(blobs), len(firstBlobs))
		}
		for i := range blobs {
			if !bytes.Equal(blobs[i], firstBlobs[i]) {
				t.Fatalf("workers=%d: blob %d differs", w, i)
			}
		}
	}
}

// TestStoredDigestVerifyDoesNotDecode: with digests of stored bytes,
// VerifyChunk hashes the stored bytes and decodes nothing, so a frame
// that hashes right but is no zstd passes it, and DecodeChunk then
// refuses it with a zstd error. A flipped stored byte fails both, and
// DecodeChunk does not decode bytes that fail the digest.
func TestStoredDigestVerifyDoesNotDecode(t *testing.T) {
	plain := bytes.Repeat([]byte("damselfly "), 10000)
	z := enc2(t, plain)
	good := Chunk{Digest: StoredSum(true, z), Size: uint32(len(plain)), CompressedSize: uint32(len(z)),
		Flags: ChunkCompressed | ChunkStoredDigest}
	dst := make([]byte, len(plain))
	if err := VerifyChunk(good, z, nil); err != nil {
		t.Fatalf("VerifyChunk of a good frame: %v", err)
	}
	if err := DecodeChunk(good, z, dst); err != nil || !bytes.Equal(dst, plain) {
		t.Fatalf("DecodeChunk of a good frame: %v", err)
	}

	flipped := bytes.Clone(z)
	flipped[len(flipped)/2] ^= 0x01
	var scratch []byte
	if err := VerifyChunk(good, flipped, &scratch); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("VerifyChunk of a flipped byte: got %v, want ErrDigestMismatch", err)
	}
	if cap(scratch) != 0 {
		t.Errorf("VerifyChunk grew scratch to %d bytes: it decoded", cap(scratch))
	}
	clear(dst)
	if err := DecodeChunk(good, flipped, dst); !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "stored") {
		t.Errorf("DecodeChunk of a flipped byte: got %v, want a mismatch of the stored bytes", err)
	}
	if !bytes.Equal(dst, make([]byte, len(dst))) {
		t.Error("DecodeChunk wrote into dst before the stored bytes were checked")
	}

	// Not zstd at all, but anchored: the peer's check passes it on, the
	// reader's decode refuses it.
	junk := bytes.Repeat([]byte{0xA5}, 200)
	notZstd := Chunk{Digest: StoredSum(true, junk), Size: 5000, CompressedSize: uint32(len(junk)),
		Flags: ChunkCompressed | ChunkStoredDigest}
	if err := VerifyChunk(notZstd, junk, nil); err != nil {
		t.Errorf("VerifyChunk of anchored non-zstd bytes: %v (it must not decode)", err)
	}
	if err := DecodeChunk(notZstd, junk, make([]byte, 5000)); err == nil || !strings.Contains(err.Error(), "zstd") {
		t.Errorf("DecodeChunk of anchored non-zstd bytes: got %v, want a zstd error", err)
	}

	// The same bytes read in the other form are another chunk: the
	// raw form's digest does not name the frame, and the reverse.
	asRaw := Chunk{Digest: StoredSum(false, z), Size: uint32(len(z)), CompressedSize: uint32(len(z)), Flags: ChunkStoredDigest}
	if err := VerifyChunk(asRaw, z, nil); err != nil {
		t.Errorf("raw chunk whose bytes are a frame: %v", err)
	}
	swapped := asRaw
	swapped.Flags |= ChunkCompressed
	swapped.Size = uint32(len(plain))
	if err := VerifyChunk(swapped, z, nil); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("frame under its raw form's digest: got %v, want ErrDigestMismatch", err)
	}
	if err := DecodeChunk(swapped, z, make([]byte, len(plain))); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("DecodeChunk of a frame under its raw form's digest: got %v, want ErrDigestMismatch", err)
	}

	// A raw chunk: stored bytes are the content.
	raw := Chunk{Digest: StoredSum(false, plain), Size: uint32(len(plain)), CompressedSize: uint32(len(plain)), Flags: ChunkStoredDigest}
	if err := VerifyChunk(raw, plain, nil); err != nil {
		t.Errorf("raw: %v", err)
	}
	badPlain := bytes.Clone(plain)
	badPlain[7] ^= 0x80
	if err := VerifyChunk(raw, badPlain, nil); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("raw, a flipped bit: got %v, want ErrDigestMismatch", err)
	}
	if err := DecodeChunk(raw, badPlain, make([]byte, len(plain))); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("DecodeChunk raw, a flipped bit: got %v, want ErrDigestMismatch", err)
	}
}

// TestStoredDigestFlagsChecked: a chunk with both algorithm bits, an
// algo-3 chunk in a blake3 bootstrap and a blake3 chunk in an algo-3
// bootstrap are corrupt; the superblock may name algorithm 3.
func TestStoredDigestFlagsChecked(t *testing.T) {
	layer := makeTar(t, []tarEntry{{name: "f", data: randBytes(33, 1000)}})
	if err := CheckChunkFlags(ChunkCompressed | ChunkStoredDigest); err != nil {
		t.Errorf("CheckChunkFlags(compressed|stored): %v", err)
	}
	if err := CheckChunkFlags(ChunkBlake3 | ChunkStoredDigest); err == nil {
		t.Error("CheckChunkFlags(blake3|stored): no error")
	}
	if err := CheckChunkFlags(1 << 3); err == nil {
		t.Error("CheckChunkFlags(bit 3): no error")
	}
	setFlags := func(boot []byte, b *Bootstrap, f func(uint32) uint32) error {
		idx := bytes.Index(boot, b.record(secChunks, 0))
		if idx < 0 {
			t.Fatal("chunk record not found")
		}
		bad := bytes.Clone(boot)
		binary.LittleEndian.PutUint32(bad[idx+36:], f(binary.LittleEndian.Uint32(bad[idx+36:])))
		nb, err := Decode(reseal(bad), OpenOptions{})
		if err == nil {
			_, err = nb.Chunk(0)
		}
		return err
	}
	for _, algo := range []DigestAlgo{DigestStoredBlake3, DigestBlake3} {
		_, res := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Digest: algo}, layer)
		b, err := Decode(res.Bootstrap, OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Chunk(0); err != nil {
			t.Fatalf("%s: good chunk: %v", algo, err)
		}
		both := func(f uint32) uint32 { return f | ChunkBlake3 | ChunkStoredDigest }
		if err := setFlags(res.Bootstrap, b, both); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "two digest algorithms") {
			t.Errorf("%s bootstrap, chunk with both algorithm bits: got %v, want ErrCorrupt", algo, err)
		}
		swap := func(f uint32) uint32 { return f ^ (ChunkBlake3 | ChunkStoredDigest) }
		if err := setFlags(res.Bootstrap, b, swap); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "digest") {
			t.Errorf("%s bootstrap, chunk of the other algorithm: got %v, want ErrCorrupt", algo, err)
		}
	}
	for _, s := range []string{"blake3-stored", "blake3", "sha256"} {
		a, err := ParseDigestAlgo(s)
		if err != nil || a.String() != s {
			t.Errorf("ParseDigestAlgo(%q) = %v, %v", s, a, err)
		}
	}
	if DefaultDigest != DigestStoredBlake3 {
		t.Errorf("DefaultDigest is %s, want blake3-stored", DefaultDigest)
	}
}

// TestStoredDigestDict: a blake3-stored dictionary matches chunks
// compressed at its level, raw chunks at any level, and a dictionary of
// another algorithm is refused.
func TestStoredDigestDict(t *testing.T) {
	layer := storedLayer(t)
	build := func(level int, dict *Bootstrap, algo DigestAlgo) (*Bootstrap, *BuildResult, error) {
		res, err := Build(t.Context(), layersOf(layer), BuildOptions{ChunkSize: MinChunkSize, Digest: algo,
			Level: level, Dict: dict, BlobDir: t.TempDir()})
		if err != nil {
			return nil, nil, err
		}
		b, err := Decode(res.Bootstrap, OpenOptions{})
		return b, res, err
	}
	dict, dres, err := build(1, nil, DigestStoredBlake3)
	if err != nil {
		t.Fatal(err)
	}
	_, same, err := build(1, dict, DigestStoredBlake3)
	if err != nil {
		t.Fatal(err)
	}
	if same.Stats.NewChunks != 0 || same.Stats.DictChunks != dres.Stats.NewChunks {
		t.Errorf("same level: %d new and %d dictionary chunks, want 0 and %d", same.Stats.NewChunks, same.Stats.DictChunks, dres.Stats.NewChunks)
	}
	var rawChunks int
	for i := range dict.ChunkCount() {
		if c, _ := dict.Chunk(i); !c.Compressed() {
			rawChunks++
		}
	}
	_, other, err := build(3, dict, DigestStoredBlake3)
	if err != nil {
		t.Fatal(err)
	}
	// Raw chunks match whatever the level; of the compressed ones, only
	// those the two levels happen to compress alike (the zeros).
	if other.Stats.DictChunks < rawChunks || other.Stats.NewChunks == 0 || other.Stats.DictChunks+other.Stats.NewChunks != dres.Stats.NewChunks {
		t.Errorf("another level: %d dictionary and %d new chunks, want at least the %d raw ones from the dictionary, some new, %d in all",
			other.Stats.DictChunks, other.Stats.NewChunks, rawChunks, dres.Stats.NewChunks)
	}
	if _, _, err := build(1, dict, DigestBlake3); err == nil || !strings.Contains(err.Error(), "blake3-stored") {
		t.Errorf("blake3 build with a blake3-stored dictionary: got %v, want an error naming the algorithm", err)
	}
}
