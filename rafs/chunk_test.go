package rafs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// bombChunk describes stored as a compressed chunk of size bytes.
func bombChunk(stored []byte, size uint32) Chunk {
	return Chunk{Flags: ChunkCompressed, CompressedSize: uint32(len(stored)), Size: size,
		Digest: sha256.Sum256(make([]byte, size))}
}

// Decompression bombs: stored bytes that inflate beyond the chunk's
// recorded size are refused, and decoding them allocates nothing near
// what they inflate to, whether the frame declares its true size or none.
func TestDecodeChunkRefusesBombs(t *testing.T) {
	const size = 64 << 10
	zeros := make([]byte, 8<<20)

	// A frame that declares its (large) content size.
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	declared := enc.EncodeAll(zeros, nil)
	enc.Close()

	// A streamed frame, which declares no content size.
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(zeros); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	streamed := buf.Bytes()
	var hdr zstd.Header
	if err := hdr.Decode(streamed); err != nil || hdr.HasFCS {
		t.Fatalf("streamed frame header: %+v, %v; want no content size", hdr, err)
	}

	// One byte over: a frame of size+1 bytes, declared and not.
	over := enc2(t, make([]byte, size+1))

	// Warm the shared decoder, so that its own buffers are not counted.
	fine := make([]byte, size)
	fine[7] = 1
	if err := DecodeChunk(Chunk{Flags: ChunkCompressed, Size: size, Digest: sha256.Sum256(fine), CompressedSize: uint32(len(enc2(t, fine)))},
		enc2(t, fine), make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	for name, stored := range map[string][]byte{"declared 8 MiB": declared, "undeclared 8 MiB": streamed, "one byte over": over} {
		c := bombChunk(stored, size)
		dst := make([]byte, size)
		before := allocBytes()
		err := DecodeChunk(c, stored, dst)
		grew := allocBytes() - before
		if !errors.Is(err, ErrDigestMismatch) {
			t.Errorf("%s (%d stored bytes): got %v, want ErrDigestMismatch", name, len(stored), err)
		}
		// The decoder's own block buffers are a few hundred KiB; the
		// bombs inflate to 8 MiB.
		if grew > 1<<20 {
			t.Errorf("%s: decoding allocated %d bytes, more than 1 MiB", name, grew)
		}
	}

	// The same frames are fine for a chunk of their true size.
	c := bombChunk(declared, uint32(len(zeros)))
	if err := DecodeChunk(c, declared, make([]byte, len(zeros))); err != nil {
		t.Errorf("declared frame as an 8 MiB chunk: %v", err)
	}
}

// allocBytes is the bytes this process has allocated so far.
func allocBytes() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// enc2 compresses p into one frame with its content size declared.
func enc2(t *testing.T, p []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(p, nil)
}

// VerifyChunk accepts exactly what DecodeChunk accepts, raw or
// compressed, and hashes a raw chunk without copying it.
func TestVerifyChunk(t *testing.T) {
	plain := bytes.Repeat([]byte("damselfly "), 10000)
	d := sha256.Sum256(plain)
	raw := Chunk{Digest: d, Size: uint32(len(plain)), CompressedSize: uint32(len(plain))}
	z := enc2(t, plain)
	comp := Chunk{Digest: d, Size: uint32(len(plain)), CompressedSize: uint32(len(z)), Flags: ChunkCompressed}
	flipped := bytes.Clone(plain)
	flipped[5000] ^= 1
	zBad := bytes.Clone(z)
	zBad[len(zBad)/2] ^= 0xff
	short := raw
	short.CompressedSize--
	var scratch []byte
	for _, tc := range []struct {
		name   string
		c      Chunk
		stored []byte
		ok     bool
	}{
		{"raw", raw, plain, true},
		{"compressed", comp, z, true},
		{"raw, a bit flipped", raw, flipped, false},
		{"raw, one byte short", short, plain[:len(plain)-1], false},
		{"raw, longer than recorded", raw, append(bytes.Clone(plain), 0), false},
		{"compressed, damaged", comp, zBad, false},
		{"compressed bytes described as raw", Chunk{Digest: d, Size: uint32(len(z)), CompressedSize: uint32(len(z))}, z, false},
	} {
		err := VerifyChunk(tc.c, tc.stored, &scratch)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v", tc.name, err, tc.ok)
		}
		if len(tc.stored) == int(tc.c.Size) {
			dst := make([]byte, tc.c.Size)
			if derr := DecodeChunk(tc.c, tc.stored, dst); (derr == nil) != (err == nil) {
				t.Errorf("%s: VerifyChunk %v, DecodeChunk %v", tc.name, err, derr)
			}
		}
	}
	if n := testing.AllocsPerRun(5, func() { _ = VerifyChunk(raw, plain, &scratch) }); n != 0 {
		t.Errorf("verifying a raw chunk allocates %v times", n)
	}
}
