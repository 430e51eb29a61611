package rafs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// ErrDigestMismatch is returned (wrapped) when a chunk's bytes do not hash
// to the digest the bootstrap records for it.
var ErrDigestMismatch = errors.New("rafs: chunk digest mismatch")

// ChunkSource delivers verified chunk contents. Implementations decide
// where stored bytes come from (a local blob directory, a node cache, a
// peer, a registry).
type ChunkSource interface {
	// ReadChunk fills dst (len(dst) == int(c.Size)) with the uncompressed
	// bytes of c, verified against c.Digest. It may block on I/O and must
	// honour ctx. It is safe for concurrent use. On error dst's contents
	// are unspecified.
	ReadChunk(ctx context.Context, c Chunk, dst []byte) error
}

// BlobReader reads stored (possibly compressed) bytes from blobs.
type BlobReader interface {
	// ReadBlob fills p with blob bytes [off, off+len(p)). It is safe for
	// concurrent use and returns an error if fewer bytes are available.
	ReadBlob(ctx context.Context, blob Blob, off int64, p []byte) error
}

// zstdDecoders are shared; DecodeAll is safe for concurrent use on one
// decoder, but a small pool keeps allocation per call low.
var zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(MaxChunkSize+1),
		zstd.WithDecoderMaxWindow(MaxChunkSize*2),
		// Never decode past the chunk's size, also for a frame that
		// does not declare its content size (see DecodeChunk).
		zstd.WithDecodeAllCapLimit(true),
		// The chunk's digest is checked after decoding (or, for a digest
		// of the stored bytes, before): a frame's own checksum, 32 bits of
		// xxHash over the output, would only cost another pass over it.
		zstd.IgnoreChecksum(true))
	if err != nil {
		panic(fmt.Sprintf("zstd decoder options: %v", err)) // static options: cannot fail
	}
	return d
})

// DecodeChunk turns the stored bytes of c into its content in dst
// (len(dst) == int(c.Size)) and verifies the digest. A stored chunk that
// inflates beyond its recorded size is refused without decoding more than
// that size into anything but dst. With DigestStoredBlake3 the stored
// bytes are checked first, and bytes that fail are not decoded; the
// content is then what those bytes decode to, and is not hashed.
func DecodeChunk(c Chunk, stored, dst []byte) error { return decodeChunk(c, stored, dst, false) }

// DecodeSpare is how many bytes past a chunk's end the Spare decoders
// may overwrite. With that room the zstd decoder copies literals and
// matches in whole blocks rather than byte-exact tails (klauspost's
// compressedBlockOverAlloc, 32): single-block chunks, most of an
// image's, decode about a quarter faster (BenchmarkDecodeSpare). The
// decoder itself chooses by capacity, so a smaller spare is never
// wrong, only slower.
const DecodeSpare = 32

// DecodeChunkSpare is DecodeChunk into a dst whose capacity past
// len(dst) belongs to the caller: up to DecodeSpare bytes of it may be
// overwritten (a bufpool buffer's slack; never a slice of a buffer that
// holds other data after it).
func DecodeChunkSpare(c Chunk, stored, dst []byte) error { return decodeChunk(c, stored, dst, true) }

func decodeChunk(c Chunk, stored, dst []byte, spare bool) error {
	if err := checkDecode(c, stored, dst); err != nil {
		return err
	}
	byStored := c.StoredDigest()
	if byStored && StoredSum(c.Compressed(), stored) != c.Digest {
		return fmt.Errorf("chunk %s: %w (of its stored bytes)", c.Digest, ErrDigestMismatch)
	}
	if err := decodeInto(c, stored, dst, spare); err != nil {
		return err
	}
	if !byStored && c.Algo().Sum(dst) != c.Digest {
		return fmt.Errorf("chunk %s: %w", c.Digest, ErrDigestMismatch)
	}
	return nil
}

// DecodeVerifiedStored is DecodeChunk for a chunk whose digest is of its
// stored bytes (DigestStoredBlake3) and whose stored bytes the caller
// has just checked against it (ReadRawChunk, VerifyChunk): it decodes
// them into dst with DecodeChunk's bounds and hashes nothing. Bytes not
// so checked must go through DecodeChunk. A chunk of another algorithm
// is refused: its content is what must be hashed.
func DecodeVerifiedStored(c Chunk, stored, dst []byte) error {
	return decodeVerifiedStored(c, stored, dst, false)
}

// DecodeVerifiedStoredSpare is DecodeVerifiedStored into a dst whose
// capacity past len(dst) belongs to the caller, as DecodeChunkSpare.
func DecodeVerifiedStoredSpare(c Chunk, stored, dst []byte) error {
	return decodeVerifiedStored(c, stored, dst, true)
}

func decodeVerifiedStored(c Chunk, stored, dst []byte, spare bool) error {
	if !c.StoredDigest() {
		return fmt.Errorf("chunk %s: %s digests are of content, not of stored bytes: use DecodeChunk", c.Digest, c.Algo())
	}
	if err := checkDecode(c, stored, dst); err != nil {
		return err
	}
	return decodeInto(c, stored, dst, spare)
}

// checkDecode checks the lengths DecodeChunk is given.
func checkDecode(c Chunk, stored, dst []byte) error {
	if len(dst) != int(c.Size) {
		return fmt.Errorf("chunk %s: buffer of %d bytes for %d", c.Digest, len(dst), c.Size)
	}
	if c.Compressed() && c.Size == 0 {
		return fmt.Errorf("chunk %s: %w: compressed empty chunk", c.Digest, ErrDigestMismatch)
	}
	if len(stored) != int(c.CompressedSize) {
		return fmt.Errorf("chunk %s: %d stored bytes, want %d", c.Digest, len(stored), c.CompressedSize)
	}
	return nil
}

// decodeInto turns stored into dst (lengths checked), inflating a
// compressed chunk to exactly its recorded size or failing. With spare,
// the decoder may also write up to DecodeSpare bytes of dst's capacity
// past its length.
func decodeInto(c Chunk, stored, dst []byte, spare bool) error {
	if !c.Compressed() {
		copy(dst, stored)
		return nil
	}
	var hdr zstd.Header
	if err := hdr.Decode(stored); err != nil {
		return fmt.Errorf("chunk %s: zstd header: %w: %w", c.Digest, ErrDigestMismatch, err)
	}
	// Tiny frames may omit the content size; the decoder's memory
	// limit and the length check below still bound them.
	if hdr.HasFCS && hdr.FrameContentSize != uint64(c.Size) {
		return fmt.Errorf("chunk %s: %w: frame declares %d bytes, want %d", c.Digest, ErrDigestMismatch, hdr.FrameContentSize, c.Size)
	}
	limit := len(dst)
	if spare {
		limit = min(cap(dst), len(dst)+DecodeSpare)
	}
	out, err := zstdDecoder().DecodeAll(stored, dst[:0:limit])
	if err != nil {
		return fmt.Errorf("chunk %s: %w: zstd: %w", c.Digest, ErrDigestMismatch, err)
	}
	if len(out) != int(c.Size) || &out[0] != &dst[0] {
		return fmt.Errorf("chunk %s: %w: inflated to %d bytes, want %d", c.Digest, ErrDigestMismatch, len(out), c.Size)
	}
	return nil
}

// VerifyChunk checks stored, chunk c as a blob stores it, against
// c.Digest without keeping the plain bytes: a raw chunk is hashed where
// it lies (no copy); a compressed one is decoded into *scratch (grown
// as needed) and checked as DecodeChunk does, unless its digest is of
// its stored bytes (DigestStoredBlake3): then only those are hashed,
// nothing is decoded and scratch is not used (it may be nil). Scratch is
// the caller's to its capacity: decoding may write up to DecodeSpare
// bytes past the chunk's size.
//
// Bytes that pass with DigestStoredBlake3 are the chunk's as the image
// stores them, which is all a peer passing them on needs; whether a
// compressed chunk's frame decodes to its size is DecodeChunk's to
// find, when a reader decodes it.
func VerifyChunk(c Chunk, stored []byte, scratch *[]byte) error {
	if c.StoredDigest() {
		switch {
		case len(stored) != int(c.CompressedSize):
			return fmt.Errorf("chunk %s: %d stored bytes, want %d", c.Digest, len(stored), c.CompressedSize)
		case c.Compressed() && c.Size == 0:
			return fmt.Errorf("chunk %s: %w: compressed empty chunk", c.Digest, ErrDigestMismatch)
		case !c.Compressed() && len(stored) != int(c.Size):
			return fmt.Errorf("chunk %s: %d stored bytes of a raw chunk of %d", c.Digest, len(stored), c.Size)
		case StoredSum(c.Compressed(), stored) != c.Digest:
			return fmt.Errorf("chunk %s: %w (of its stored bytes)", c.Digest, ErrDigestMismatch)
		}
		return nil
	}
	if c.Compressed() {
		if cap(*scratch) < int(c.Size) {
			*scratch = make([]byte, c.Size, int(c.Size)+DecodeSpare)
		}
		return DecodeChunkSpare(c, stored, (*scratch)[:c.Size])
	}
	if len(stored) != int(c.CompressedSize) || len(stored) != int(c.Size) {
		return fmt.Errorf("chunk %s: %d stored bytes of a raw chunk of %d (%d recorded)", c.Digest, len(stored), c.Size, c.CompressedSize)
	}
	if c.Algo().Sum(stored) != c.Digest {
		return fmt.Errorf("chunk %s: %w", c.Digest, ErrDigestMismatch)
	}
	return nil
}

// BlobChunkSource reads chunks through a BlobReader, one range per chunk,
// decoding and verifying each.
type BlobChunkSource struct {
	Bootstrap *Bootstrap
	Blobs     BlobReader
}

var _ ChunkSource = (*BlobChunkSource)(nil)

var storedPool = sync.Pool{New: func() any { b := make([]byte, 0, DefaultChunkSize); return &b }}

// ReadChunk implements ChunkSource.
func (s *BlobChunkSource) ReadChunk(ctx context.Context, c Chunk, dst []byte) error {
	blob, err := s.Bootstrap.Blob(c.Blob)
	if err != nil {
		return err
	}
	if !c.Compressed() {
		if len(dst) != int(c.Size) {
			return fmt.Errorf("chunk %s: buffer of %d bytes for %d", c.Digest, len(dst), c.Size)
		}
		if err := s.Blobs.ReadBlob(ctx, blob, int64(c.CompressedOffset), dst); err != nil {
			return fmt.Errorf("read chunk %s from blob %s: %w", c.Digest, blob.Digest, err)
		}
		// A raw chunk's stored bytes are its content: every algorithm's
		// digest of them is Sum's.
		if c.Algo().Sum(dst) != c.Digest {
			return fmt.Errorf("chunk %s from blob %s: %w", c.Digest, blob.Digest, ErrDigestMismatch)
		}
		return nil
	}
	bp := storedPool.Get().(*[]byte)
	defer storedPool.Put(bp)
	if cap(*bp) < int(c.CompressedSize) {
		*bp = make([]byte, c.CompressedSize)
	}
	stored := (*bp)[:c.CompressedSize]
	if err := s.Blobs.ReadBlob(ctx, blob, int64(c.CompressedOffset), stored); err != nil {
		return fmt.Errorf("read chunk %s from blob %s: %w", c.Digest, blob.Digest, err)
	}
	return DecodeChunk(c, stored, dst)
}
