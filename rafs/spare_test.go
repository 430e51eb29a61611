package rafs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// textLike is n bytes of words drawn from a small vocabulary: content
// that compresses about as source files and scripts do, with literals
// and matches of every length.
func textLike(seed uint64, n int) []byte {
	words := []string{"import ", "numpy", " def ", "return", "(self, ", "x", "\n\t", "= ", "0x1f", "class ",
		"np.array", ", dtype=", "float32", ")", "#", " if ", "not ", "None", ":", "lib/python3/"}
	r := rand.New(rand.NewPCG(seed, 7))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(9) == 0 {
			fmt.Fprintf(&b, "%x", r.Uint32())
		}
	}
	return b.Bytes()[:n]
}

// encodeFastest compresses p as the converter's default level does.
func encodeFastest(t testing.TB, p []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(p, nil)
}

// The Spare decoders write nothing past DecodeSpare bytes beyond the
// chunk, the exact ones nothing past the chunk, both give the content,
// and a frame that inflates past the chunk's size is refused either way.
func TestDecodeChunkSpare(t *testing.T) {
	t.Parallel()
	const fill = 0xa5
	for _, size := range []int{1, 1000, 64<<10 - 1, 128 << 10, 300 << 10} {
		content := textLike(uint64(size), size)
		stored := encodeFastest(t, content)
		c := Chunk{Flags: ChunkCompressed, Size: uint32(size), CompressedSize: uint32(len(stored)), Digest: sha256.Sum256(content)}
		for _, spare := range []bool{false, true} {
			buf := bytes.Repeat([]byte{fill}, size+DecodeSpare+64)
			decode, room := DecodeChunk, 0
			if spare {
				decode, room = DecodeChunkSpare, DecodeSpare
			}
			if err := decode(c, stored, buf[:size]); err != nil {
				t.Fatalf("%d bytes, spare %v: %v", size, spare, err)
			}
			if !bytes.Equal(buf[:size], content) {
				t.Fatalf("%d bytes, spare %v: content differs", size, spare)
			}
			if i := notFill(buf[size+room:], fill); i >= 0 {
				t.Fatalf("%d bytes, spare %v: byte %d past the chunk overwritten", size, spare, room+i)
			}
		}

		// The same content one byte longer, in a frame that does not
		// declare its size, described as a chunk of size bytes.
		var sb bytes.Buffer
		w, err := zstd.NewWriter(&sb, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			t.Fatal(err)
		}
		w.Write(append(content, 'x'))
		w.Close()
		bomb := Chunk{Flags: ChunkCompressed, Size: uint32(size), CompressedSize: uint32(sb.Len()), Digest: c.Digest}
		buf := bytes.Repeat([]byte{fill}, size+DecodeSpare+64)
		if err := DecodeChunkSpare(bomb, sb.Bytes(), buf[:size]); !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("%d bytes + 1 in an undeclared frame: got %v, want a digest mismatch", size, err)
		}
		if i := notFill(buf[size+DecodeSpare:], fill); i >= 0 {
			t.Fatalf("%d bytes + 1: byte %d past the spare overwritten", size, DecodeSpare+i)
		}
	}
}

// notFill is the index of the first byte of p that is not fill, or -1.
func notFill(p []byte, fill byte) int {
	for i, b := range p {
		if b != fill {
			return i
		}
	}
	return -1
}

// BenchmarkDecodeSpare decodes text-like chunks of 4 KiB to 256 KiB
// (most of an image's chunks are whole small files) into buffers of
// their exact size and into buffers with DecodeSpare bytes of room.
func BenchmarkDecodeSpare(b *testing.B) {
	var chunks []Chunk
	var stored [][]byte
	total := 0
	for i := range 200 {
		n := 4<<10 + (i*7919)%(252<<10)
		p := textLike(uint64(i), n)
		s := encodeFastest(b, p)
		chunks = append(chunks, Chunk{Flags: ChunkCompressed | ChunkStoredDigest, Size: uint32(n), CompressedSize: uint32(len(s)),
			Digest: StoredSum(true, s)})
		stored, total = append(stored, s), total+n
	}
	for _, spare := range []bool{false, true} {
		b.Run(fmt.Sprintf("spare=%v", spare), func(b *testing.B) {
			decode := DecodeVerifiedStored
			if spare {
				decode = DecodeVerifiedStoredSpare
			}
			bufs := make([][]byte, len(chunks))
			for i, c := range chunks {
				bufs[i] = make([]byte, c.Size, int(c.Size)+DecodeSpare)
			}
			b.SetBytes(int64(total))
			for b.Loop() {
				for i, c := range chunks {
					if err := decode(c, stored[i], bufs[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// FuzzDecodeChunkSpare: any stored bytes, any size: the exact and the
// Spare decoders agree (same verdict, same content), neither panics, and
// neither writes past its room.
func FuzzDecodeChunkSpare(f *testing.F) {
	for _, n := range []int{1, 100, 5000, 140 << 10} {
		p := textLike(uint64(n), n)
		f.Add(encodeFastest(f, p), uint32(n))
		f.Add(p, uint32(n))
	}
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0}, uint32(8))
	f.Fuzz(func(t *testing.T, stored []byte, size uint32) {
		size %= 512 << 10
		const fill = 0x5a
		var content [2][]byte
		var errs [2]error
		for i, decode := range []func(Chunk, []byte, []byte) error{DecodeChunk, DecodeChunkSpare} {
			// Named by its stored bytes, so that whether it decodes to
			// size bytes is the whole verdict.
			c := Chunk{Flags: ChunkCompressed | ChunkStoredDigest, Size: size, CompressedSize: uint32(len(stored)),
				Digest: StoredSum(true, stored)}
			buf := bytes.Repeat([]byte{fill}, int(size)+DecodeSpare+16)
			errs[i] = decode(c, stored, buf[:size])
			room := 0
			if i == 1 {
				room = DecodeSpare
			}
			if j := notFill(buf[int(size)+room:], fill); j >= 0 {
				t.Fatalf("decoder %d wrote byte %d past the chunk's %d", i, room+j, size)
			}
			content[i] = buf[:size]
		}
		if (errs[0] == nil) != (errs[1] == nil) || errs[0] != nil && !errors.Is(errs[0], ErrDigestMismatch) {
			t.Fatalf("verdicts differ or are not a mismatch: %v / %v", errs[0], errs[1])
		}
		if errs[0] == nil && !bytes.Equal(content[0], content[1]) {
			t.Fatal("content differs")
		}
	})
}
