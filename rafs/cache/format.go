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
//
// Version 2 added flag bit 1, the digest is BLAKE3's: a version 1 entry is
// always SHA-256's. A SHA-256 entry is still written as version 1, so that
// processes of the release before, which share the directory and refuse
// any other version, keep reading it; only a BLAKE3 entry, which they
// never look up by its name (see paths.go), is version 2, and a version
// 2 header without the flag is refused: one key, one encoding.
//
// Version 3 added flag bit 2, the digest is BLAKE3 of the stored bytes
// (rafs.DigestStoredBlake3), set exactly in version 3 and never with bit
// 1. Only such entries are version 3, under their own name (paths.go),
// which processes of earlier releases never open.
const (
	magic      = "DFLYCHNK"
	version1   = 1
	version2   = 2
	version3   = 3
	headerSize = 64

	flagCompressed uint16 = 1 << 0
	flagBlake3     uint16 = 1 << 1
	flagStored     uint16 = 1 << 2
	knownFlagsV1          = flagCompressed
	knownFlagsV2          = flagCompressed | flagBlake3
	knownFlagsV3          = flagCompressed | flagStored

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
	key        Key
	meta       Meta
	payloadCRC uint32 // CRC32-C of the stored bytes
}

// encodeHeader lays h out in b.
func encodeHeader(b *[headerSize]byte, h header) {
	le := binary.LittleEndian
	*b = [headerSize]byte{}
	copy(b[offMagic:], magic)
	version := uint16(version1)
	var flags uint16
	if h.meta.Compressed {
		flags |= flagCompressed
	}
	switch h.key.Algo {
	case rafs.DigestBlake3:
		flags |= flagBlake3
		version = version2
	case rafs.DigestStoredBlake3:
		flags |= flagStored
		version = version3
	}
	le.PutUint16(b[offVersion:], version)
	le.PutUint16(b[offFlags:], flags)
	le.PutUint32(b[offSize:], h.meta.Size)
	le.PutUint32(b[offStoredSize:], h.meta.StoredSize)
	le.PutUint32(b[offPayloadCRC:], h.payloadCRC)
	copy(b[offDigest:], h.key.Digest[:])
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
	known := knownFlagsV1
	switch v := le.Uint16(b[offVersion:]); v {
	case version1:
	case version2:
		known = knownFlagsV2
	case version3:
		known = knownFlagsV3
	default:
		return header{}, corruptf("version %d, want %d, %d or %d", v, version1, version2, version3)
	}
	flags := le.Uint16(b[offFlags:])
	if flags&^known != 0 {
		return header{}, corruptf("unknown flags %#x", flags)
	}
	if known == knownFlagsV2 && flags&flagBlake3 == 0 {
		return header{}, corruptf("version 2 for a SHA-256 entry")
	}
	if known == knownFlagsV3 && flags&flagStored == 0 {
		return header{}, corruptf("version 3 without its algorithm's flag")
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
	h.key.Algo = rafs.DigestSHA256
	switch {
	case flags&flagBlake3 != 0:
		h.key.Algo = rafs.DigestBlake3
	case flags&flagStored != 0:
		h.key.Algo = rafs.DigestStoredBlake3
	}
	copy(h.key.Digest[:], b[offDigest:])
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
