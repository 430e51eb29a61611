package rafs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
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
	for _, algo := range []DigestAlgo{DigestBlake3, DigestSHA256} {
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
