package piece

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"damselfly/rafs"
)

// Limits of a table, checked by Decode before it allocates.
const (
	// DefaultSize is the piece size peers use unless configured otherwise.
	DefaultSize = 4 << 20
	// MinSize and MaxSize bound a piece (MaxSize is the largest chunk
	// the node cache and the exchange carry).
	MinSize = 64 << 10
	MaxSize = rafs.MaxChunkSize
	// MaxPieces bounds the pieces of one blob, so a table is at most
	// about 2 MiB and a 4 MiB-piece blob at most 256 GiB.
	MaxPieces = 1 << 16
)

// Encoding of a table (all integers little endian):
//
//	offset  size  field
//	0       8     magic "DFLYPCTB"
//	8       2     version, 1
//	10      2     flags: 0, or 1 for a partial table
//	12      4     piece size, MinSize..MaxSize
//	16      8     blob size, 1..MaxPieces × piece size
//	24      32    blob digest (sha256)
//	56      4     n: piece count, exactly ceil(blob size / piece size)
//	60      32·n  piece digests (sha256 of each piece's bytes), in order;
//	              in a partial table all zero for a piece not known yet
//	60+32n  4     CRC32-C of every byte before it
const (
	magic       = "DFLYPCTB"
	version     = 1
	headerSize  = 60
	flagPartial = 1
	// MaxEncodedSize is the largest valid encoding.
	MaxEncodedSize = headerSize + 32*MaxPieces + 4
)

// ErrCorrupt is wrapped by Decode's errors.
var ErrCorrupt = errors.New("corrupt piece table")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Table describes how one blob is cut into pieces. Tables are values;
// Digests must not be changed after the table is made.
type Table struct {
	Blob      rafs.Digest // sha256 of the whole blob
	Size      int64       // blob length in bytes, at least 1
	PieceSize int64       // every piece but the last is this long
	Digests   []rafs.Digest
}

// Count returns the number of pieces.
func (t *Table) Count() int { return len(t.Digests) }

// A partial table is one whose holder knows some pieces' digests only: a
// blob being pulled, whose pieces are announced as they land from the
// origin, before anyone has the whole blob to check (package
// peer/plain). An unknown digest is the zero Digest; no sha256 of real
// bytes is zero.

// Known reports whether piece i's digest is known.
func (t *Table) Known(i int) bool { return t.Digests[i] != (rafs.Digest{}) }

// Complete reports whether every piece's digest is known.
func (t *Table) Complete() bool {
	for i := range t.Digests {
		if !t.Known(i) {
			return false
		}
	}
	return true
}

// Chunk returns piece i as a raw chunk of the blob: ordinal i, at offset
// i × PieceSize. i must be below Count.
func (t *Table) Chunk(i int) rafs.Chunk {
	off := int64(i) * t.PieceSize
	n := uint32(min(t.PieceSize, t.Size-off))
	return rafs.Chunk{
		Index:            uint32(i),
		Ordinal:          uint32(i),
		Digest:           t.Digests[i],
		CompressedOffset: uint64(off),
		CompressedSize:   n,
		Size:             n,
	}
}

// Chunks returns pieces [first, last) as chunks.
func (t *Table) Chunks(first, last int) []rafs.Chunk {
	out := make([]rafs.Chunk, 0, last-first)
	for i := first; i < last; i++ {
		out = append(out, t.Chunk(i))
	}
	return out
}

// Covering returns the pieces [first, last) that hold bytes [off, end) of
// the blob; 0 <= off < end <= Size.
func (t *Table) Covering(off, end int64) (first, last int) {
	return int(off / t.PieceSize), int((end + t.PieceSize - 1) / t.PieceSize)
}

// Check reports whether t keeps every rule of the encoding.
func (t *Table) Check() error {
	if t.PieceSize < MinSize || t.PieceSize > MaxSize {
		return fmt.Errorf("%w: piece size %d outside %d..%d", ErrCorrupt, t.PieceSize, MinSize, MaxSize)
	}
	if t.Size < 1 || t.Size > MaxPieces*t.PieceSize {
		return fmt.Errorf("%w: blob size %d outside 1..%d", ErrCorrupt, t.Size, MaxPieces*t.PieceSize)
	}
	if want := (t.Size + t.PieceSize - 1) / t.PieceSize; int64(len(t.Digests)) != want {
		return fmt.Errorf("%w: %d pieces for %d bytes in pieces of %d, want %d", ErrCorrupt, len(t.Digests), t.Size, t.PieceSize, want)
	}
	return nil
}

// Encode lays t out as above, flagged partial unless Complete; t must
// pass Check.
func (t *Table) Encode() []byte {
	b := make([]byte, 0, headerSize+32*len(t.Digests)+4)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, version)
	var flags uint16
	if !t.Complete() {
		flags = flagPartial
	}
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(t.PieceSize))
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Size))
	b = append(b, t.Blob[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Digests)))
	for _, d := range t.Digests {
		b = append(b, d[:]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// Decode parses an encoded table, checking magic, version, flags, limits,
// the length against the piece count (before allocating) and the CRC; a
// table is flagged partial exactly when it lacks a digest. It never
// panics.
func Decode(b []byte) (*Table, error) {
	if len(b) < headerSize+4 || len(b) > MaxEncodedSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if string(b[:8]) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, version)
	}
	flags := binary.LittleEndian.Uint16(b[10:])
	if flags&^flagPartial != 0 {
		return nil, fmt.Errorf("%w: flags %#x", ErrCorrupt, flags)
	}
	n := binary.LittleEndian.Uint32(b[56:])
	if n > MaxPieces || len(b) != headerSize+32*int(n)+4 {
		return nil, fmt.Errorf("%w: %d bytes for %d pieces", ErrCorrupt, len(b), n)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, crcTable), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return nil, fmt.Errorf("%w: CRC %08x, want %08x", ErrCorrupt, got, want)
	}
	size := binary.LittleEndian.Uint64(b[16:])
	if size > 1<<62 {
		return nil, fmt.Errorf("%w: blob size %d", ErrCorrupt, size)
	}
	t := &Table{
		PieceSize: int64(binary.LittleEndian.Uint32(b[12:])),
		Size:      int64(size),
		Digests:   make([]rafs.Digest, n),
	}
	copy(t.Blob[:], b[24:56])
	for i := range t.Digests {
		copy(t.Digests[i][:], b[headerSize+32*i:])
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	// The flag says exactly whether a digest is missing, as Encode
	// writes it: one encoding per table.
	if partial := flags&flagPartial != 0; partial == t.Complete() {
		if partial {
			return nil, fmt.Errorf("%w: a table flagged partial that knows every digest", ErrCorrupt)
		}
		return nil, fmt.Errorf("%w: a piece without a digest in a table not flagged partial", ErrCorrupt)
	}
	return t, nil
}
