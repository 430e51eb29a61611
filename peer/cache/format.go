package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"damselfly/rafs"
)

// The entry file layout; CACHE.md documents every byte. Integers are little
// endian. The header is fixed size so that a reader checks it, and the
// file's length, before allocating anything for the payload.
const (
	magic         = "DFLYCHNK"
	formatVersion = 1
	headerSize    = 64

	flagCompressed uint16 = 1 << 0
	knownFlags            = flagCompressed

	// maxStored bounds the stored bytes of one entry, and so with the
	// header the size of any file the cache reads.
	maxStored    = rafs.MaxChunkSize
	maxEntrySize = headerSize + maxStored
)

// Field offsets in the header.
const (
	offMagic      = 0
	offVersion    = 8
	offFlags      = 10
	offSize       = 12
	offStoredSize = 16
	offPayloadCRC = 20
	offDigest     = 24
	offReserved   = 56
	offHeaderCRC  = 60
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks an entry file that fails a check. It never leaves the
// package: Get deletes such a file and reports ErrNotFound.
var errCorrupt = errors.New("corrupt cache entry")

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errCorrupt, fmt.Sprintf(format, args...))
}

// header is the decoded entry header.
type header struct {
	digest     rafs.Digest
	meta       Meta
	payloadCRC uint32 // CRC32-C of the stored bytes
}

// encodeHeader lays h out in b.
func encodeHeader(b *[headerSize]byte, h header) {
	le := binary.LittleEndian
	*b = [headerSize]byte{}
	copy(b[offMagic:], magic)
	le.PutUint16(b[offVersion:], formatVersion)
	var flags uint16
	if h.meta.Compressed {
		flags |= flagCompressed
	}
	le.PutUint16(b[offFlags:], flags)
	le.PutUint32(b[offSize:], h.meta.Size)
	le.PutUint32(b[offStoredSize:], h.meta.StoredSize)
	le.PutUint32(b[offPayloadCRC:], h.payloadCRC)
	copy(b[offDigest:], h.digest[:])
	le.PutUint32(b[offHeaderCRC:], crc32.Checksum(b[:offHeaderCRC], castagnoli))
}

// decodeHeader checks and decodes a header. Any failure wraps errCorrupt.
func decodeHeader(b []byte) (header, error) {
	le := binary.LittleEndian
	if len(b) < headerSize {
		return header{}, corruptf("header of %d bytes, want %d", len(b), headerSize)
	}
	if string(b[offMagic:offMagic+len(magic)]) != magic {
		return header{}, corruptf("bad magic %q", b[offMagic:offMagic+len(magic)])
	}
	if got, want := le.Uint32(b[offHeaderCRC:]), crc32.Checksum(b[:offHeaderCRC], castagnoli); got != want {
		return header{}, corruptf("header crc %08x, want %08x", got, want)
	}
	if v := le.Uint16(b[offVersion:]); v != formatVersion {
		return header{}, corruptf("version %d, want %d", v, formatVersion)
	}
	flags := le.Uint16(b[offFlags:])
	if flags&^knownFlags != 0 {
		return header{}, corruptf("unknown flags %#x", flags)
	}
	if r := le.Uint32(b[offReserved:]); r != 0 {
		return header{}, corruptf("reserved field %#x, want 0", r)
	}
	h := header{
		meta: Meta{
			Compressed: flags&flagCompressed != 0,
			Size:       le.Uint32(b[offSize:]),
			StoredSize: le.Uint32(b[offStoredSize:]),
		},
		payloadCRC: le.Uint32(b[offPayloadCRC:]),
	}
	copy(h.digest[:], b[offDigest:])
	if err := h.meta.check(); err != nil {
		return header{}, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return h, nil
}

// check reports whether m describes an entry the cache can hold.
func (m Meta) check() error {
	switch {
	case m.Size > rafs.MaxChunkSize:
		return fmt.Errorf("chunk size %d exceeds %d", m.Size, rafs.MaxChunkSize)
	case m.StoredSize > maxStored:
		return fmt.Errorf("stored size %d exceeds %d", m.StoredSize, maxStored)
	case !m.Compressed && m.StoredSize != m.Size:
		return fmt.Errorf("raw chunk of %d bytes stored in %d", m.Size, m.StoredSize)
	case m.Compressed && m.StoredSize == 0:
		return errors.New("compressed chunk with no stored bytes")
	}
	return nil
}
