package rafs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"damselfly/rafs/bufpool"
)

// ReadRawChunkGrowing reads and checks what ReadRawChunk does, whatever
// the sizes and however the stream is cut, into a buffer that grows past
// first only as the bytes come.
func TestReadRawChunkGrowing(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 1<<20+5)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lengths := []int{1, 1023, 1025, 16<<10 + 1, 64 << 10, 64<<10 + 1, 256<<10 + 3, 1 << 20, len(data)}
	for _, algo := range []DigestAlgo{DigestBlake3, DigestSHA256, DigestStoredBlake3} {
		for _, n := range lengths {
			c := rawChunk(algo, data[:n])
			for _, first := range []int{1, 4096, 64 << 10, 2 << 20} {
				for _, r := range []io.Reader{
					bytes.NewReader(data[:n]),
					&piecesReader{b: data[:n], rng: rng, max: 700},
				} {
					got, err := ReadRawChunkGrowing(r, c, first)
					if err != nil || !bytes.Equal(got, data[:n]) {
						t.Fatalf("%v, %d bytes, first %d, %T: got %d bytes, %v", algo, n, first, r, len(got), err)
					}
					// A pool class's capacity, so the caller can give it
					// back; and so it is, to be taken by a later read.
					if cap(got) != bufpool.Cap(n) {
						t.Fatalf("%v, %d bytes: capacity %d, want %d", algo, n, cap(got), bufpool.Cap(n))
					}
					bufpool.Put(got)
				}
			}
			bad := bytes.Clone(data[:n])
			bad[rng.IntN(n)] ^= 1 << rng.IntN(8)
			if _, err := ReadRawChunkGrowing(bytes.NewReader(bad), c, 4096); !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("%v, %d bytes, a flipped bit: got %v, want ErrDigestMismatch", algo, n, err)
			}
			if _, err := ReadRawChunkGrowing(bytes.NewReader(data[:n-1]), c, 4096); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%v, %d bytes, one short: got %v, want io.ErrUnexpectedEOF", algo, n, err)
			}
		}
	}
	if _, err := ReadRawChunkGrowing(bytes.NewReader(data), rawChunk(DigestSHA256, data[:10]), 0); err == nil {
		t.Fatal("first 0: got no error")
	}
}

// A stream that promises 16 MiB and sends 100 KiB costs about that.
func TestReadRawChunkGrowingAllocates(t *testing.T) {
	c := Chunk{Digest: Digest{1}, Size: MaxChunkSize, CompressedSize: MaxChunkSize}
	sent := make([]byte, 100<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadRawChunkGrowing(bytes.NewReader(sent), c, 64<<10)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(64<<10+6*len(sent)); got > limit {
		t.Errorf("allocated %d bytes for %d sent, want at most %d", got, len(sent), limit)
	}
}

// storedChunk describes stored as the frame of a compressed
// DigestStoredBlake3 chunk of size bytes. Nothing decodes it: the
// streaming read checks the stored bytes only, so they need not be zstd.
func storedChunk(stored []byte, size uint32) Chunk {
	return Chunk{Digest: StoredSum(true, stored), Size: size, CompressedSize: uint32(len(stored)),
		Flags: ChunkCompressed | ChunkStoredDigest}
}

// A compressed chunk whose digest is of its stored bytes is read and
// checked as it arrives like a raw one: its CompressedSize bytes, under
// the keyed hash, and the unkeyed (raw) digest of the same bytes fails.
func TestReadRawChunkStoredCompressed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := make([]byte, 300<<10+7)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, n := range []int{1, 1024, 16<<10 + 1, 64<<10 + 3, len(data)} {
		c := storedChunk(data[:n], uint32(n)*3)
		got, err := ReadRawChunkGrowing(&piecesReader{b: data[:n], rng: rng, max: 5000}, c, 4096)
		if err != nil || !bytes.Equal(got, data[:n]) {
			t.Fatalf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
		dst := make([]byte, n)
		if err := ReadRawChunk(bytes.NewReader(data[:n]), c, dst); err != nil || !bytes.Equal(dst, data[:n]) {
			t.Fatalf("%d bytes into dst: %v", n, err)
		}
		bad := bytes.Clone(data[:n])
		bad[rng.IntN(n)] ^= 1 << rng.IntN(8)
		if _, err := ReadRawChunkGrowing(bytes.NewReader(bad), c, 4096); !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("%d bytes, a flipped bit: got %v, want ErrDigestMismatch", n, err)
		}
		unkeyed := c
		unkeyed.Digest = StoredSum(false, data[:n])
		if _, err := ReadRawChunkGrowing(bytes.NewReader(data[:n]), unkeyed, 4096); !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("%d bytes under the raw form's digest: got %v, want ErrDigestMismatch", n, err)
		}
	}
	// A compressed chunk of another algorithm must be decoded to be
	// checked: refused, as is a dst of the content's size.
	c := storedChunk(data[:100], 300)
	other := c
	other.Flags = ChunkCompressed | ChunkBlake3
	if _, err := ReadRawChunkGrowing(bytes.NewReader(data[:100]), other, 4096); err == nil || errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("compressed BLAKE3 chunk: got %v, want a usage error", err)
	}
	if err := ReadRawChunk(bytes.NewReader(data[:300]), c, make([]byte, 300)); err == nil || errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("dst of the content's size: got %v, want a usage error", err)
	}
}
