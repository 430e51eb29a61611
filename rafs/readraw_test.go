package rafs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// piecesReader returns its bytes in pieces of random sizes up to max, as
// a network stream does.
type piecesReader struct {
	b   []byte
	rng *rand.Rand
	max int
}

func (r *piecesReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), 1+r.rng.IntN(r.max))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

func rawChunk(algo DigestAlgo, data []byte) Chunk {
	return Chunk{Digest: algo.Sum(data), Size: uint32(len(data)), CompressedSize: uint32(len(data)), Flags: algo.flag()}
}

func TestReadRawChunk(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 1<<20+5)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lengths := []int{1, 63, 1023, 1024, 1025, 16 << 10, 16<<10 + 1, 64 << 10, 64<<10 + 1, readRawStep*3 - 1, 1 << 20, len(data)}
	for _, algo := range []DigestAlgo{DigestBlake3, DigestSHA256, DigestStoredBlake3} {
		for _, n := range lengths {
			c := rawChunk(algo, data[:n])
			for _, r := range []io.Reader{
				bytes.NewReader(data[:n]),
				&piecesReader{b: data[:n], rng: rng, max: 40 << 10},
				&piecesReader{b: data[:n], rng: rng, max: 700},
			} {
				dst := make([]byte, n)
				if err := ReadRawChunk(r, c, dst); err != nil {
					t.Fatalf("%v, %d bytes, %T: %v", algo, n, r, err)
				}
				if !bytes.Equal(dst, data[:n]) {
					t.Fatalf("%v, %d bytes: read other bytes", algo, n)
				}
			}
			// One flipped bit anywhere fails the digest.
			bad := bytes.Clone(data[:n])
			bad[rng.IntN(n)] ^= 1 << rng.IntN(8)
			err := ReadRawChunk(&piecesReader{b: bad, rng: rng, max: 40 << 10}, c, make([]byte, n))
			if !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("%v, %d bytes, a flipped bit: got %v, want ErrDigestMismatch", algo, n, err)
			}
			// A stream that ends early.
			err = ReadRawChunk(bytes.NewReader(data[:n-1]), c, make([]byte, n))
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%v, %d bytes, one short: got %v, want io.ErrUnexpectedEOF", algo, n, err)
			}
		}
	}
	c := rawChunk(DigestBlake3, data[:100])
	if err := ReadRawChunk(iotest.OneByteReader(bytes.NewReader(data[:100])), c, make([]byte, 100)); err != nil {
		t.Fatalf("one byte at a time: %v", err)
	}
	if err := ReadRawChunk(bytes.NewReader(nil), c, make([]byte, 100)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("empty stream: got %v, want io.ErrUnexpectedEOF", err)
	}
	boom := errors.New("boom")
	if err := ReadRawChunk(iotest.ErrReader(boom), c, make([]byte, 100)); !errors.Is(err, boom) {
		t.Fatalf("failing reader: got %v, want boom", err)
	}
	// Not raw, or a buffer of the wrong size: refused before reading.
	comp := c
	comp.Flags |= ChunkCompressed
	comp.CompressedSize = 50
	for _, tc := range []struct {
		c   Chunk
		dst int
	}{{comp, 100}, {c, 99}} {
		if err := ReadRawChunk(iotest.ErrReader(boom), tc.c, make([]byte, tc.dst)); err == nil || errors.Is(err, boom) {
			t.Fatalf("chunk %+v into %d bytes: got %v, want a refusal", tc.c, tc.dst, err)
		}
	}
}

// BenchmarkReadRawChunk reads 1 MiB chunks from a stream of pieces of up
// to 16 KiB (a TLS record), from and into 64 MiB of buffers each, so that
// neither side is in the CPU's caches to begin with, as off the network
// into a new buffer per chunk: hashed as it arrives against read whole
// and then hashed.
func BenchmarkReadRawChunk(b *testing.B) {
	const n, srcs = 1 << 20, 64
	var src [srcs][]byte
	var cs [srcs]Chunk
	for i := range src {
		src[i] = make([]byte, n)
		for j := range src[i] {
			src[i][j] = byte(j * (i + 7))
		}
		cs[i] = rawChunk(DigestBlake3, src[i])
	}
	var dsts [srcs][]byte
	for i := range dsts {
		dsts[i] = make([]byte, n)
	}
	for _, whole := range []bool{false, true} {
		name := map[bool]string{false: "progressive", true: "whole"}[whole]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(n)
			i := 0
			for b.Loop() {
				r := &piecesReader{b: src[i%srcs], rng: rand.New(rand.NewPCG(1, 1)), max: 16 << 10}
				c, dst := cs[i%srcs], dsts[(i*7)%srcs]
				i++
				var err error
				if whole {
					if _, err = io.ReadFull(r, dst); err == nil {
						err = VerifyChunk(c, dst, nil)
					}
				} else {
					err = ReadRawChunk(r, c, dst)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
