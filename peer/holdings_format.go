package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// A holdings file records which chunks of one blob this node holds, so
// that it can announce them again after a restart. It is named by the
// blob digest's hex and laid out as (integers big-endian):
//
//	offset  size      field
//	0       8         magic "DFLYHOLD"
//	8       4         version, 2
//	12      32        blob digest
//	44      4         count: chunks recorded, at most MaxHoldingsPerBlob
//	48      37*count  per chunk, ordinals strictly ascending:
//	                  ordinal (4), digest algorithm (1: 1 sha256,
//	                  2 blake3, 3 blake3-stored, as rafs.DigestAlgo),
//	                  chunk digest (32)
//	48+37n  4         CRC32-C of every byte before it
//
// A chunk's key in the node cache is its digest and algorithm, so the
// holdings record both. Version 1 (the release before) had 36-byte
// entries without the algorithm; its files are still read, their chunks
// as SHA-256 ones (the cache's rule for its own version 1 entries), and
// written again as version 2 when the blob's holdings next change.
//
// The decoder checks the length against count before allocating, the CRC,
// the blob digest against the one expected, the algorithms and the
// ordering; a file that fails any check is ignored (and deleted) with a
// warning: the chunks are then announced again as they are read.
const (
	holdingsMagic     = "DFLYHOLD"
	holdingsVersion   = 2
	holdingsVersion1  = 1
	holdingsHeader    = 48
	holdingsEntry     = 37
	holdingsEntryV1   = 36
	holdingsMaxLength = holdingsHeader + holdingsEntry*MaxHoldingsPerBlob + 4
	// MaxHoldingsPerBlob bounds the chunks recorded for one blob (and
	// so the size of a holdings file, 37 MiB), as the scheduler bounds
	// chunk ordinals.
	MaxHoldingsPerBlob = 1 << 20
)

// errHoldingsCorrupt is wrapped by decodeHoldings' errors.
var errHoldingsCorrupt = errors.New("corrupt holdings file")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// holding is one chunk this node holds.
type holding struct {
	Ordinal uint32
	Key     cache.Key
}

// encodeHoldings lays out hs (ascending by ordinal, unique) for blob.
func encodeHoldings(blob rafs.Digest, hs []holding) []byte {
	b := make([]byte, 0, holdingsHeader+holdingsEntry*len(hs)+4)
	b = append(b, holdingsMagic...)
	b = binary.BigEndian.AppendUint32(b, holdingsVersion)
	b = append(b, blob[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hs)))
	for _, h := range hs {
		b = binary.BigEndian.AppendUint32(b, h.Ordinal)
		b = append(b, byte(h.Key.Algo))
		b = append(b, h.Key.Digest[:]...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// decodeHoldings checks and decodes a holdings file that should be blob's.
func decodeHoldings(blob rafs.Digest, b []byte) ([]holding, error) {
	if len(b) < holdingsHeader+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", errHoldingsCorrupt, len(b))
	}
	if string(b[:8]) != holdingsMagic {
		return nil, fmt.Errorf("%w: bad magic", errHoldingsCorrupt)
	}
	entry := holdingsEntry
	switch v := binary.BigEndian.Uint32(b[8:]); v {
	case holdingsVersion:
	case holdingsVersion1:
		entry = holdingsEntryV1
	default:
		return nil, fmt.Errorf("%w: unknown version %d", errHoldingsCorrupt, v)
	}
	if rafs.Digest(b[12:44]) != blob {
		return nil, fmt.Errorf("%w: it is for another blob", errHoldingsCorrupt)
	}
	n := binary.BigEndian.Uint32(b[44:])
	if n > MaxHoldingsPerBlob {
		return nil, fmt.Errorf("%w: %d chunks is over the limit of %d", errHoldingsCorrupt, n, MaxHoldingsPerBlob)
	}
	if want := holdingsHeader + entry*int(n) + 4; len(b) != want {
		return nil, fmt.Errorf("%w: %d bytes for %d chunks, want %d", errHoldingsCorrupt, len(b), n, want)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", errHoldingsCorrupt)
	}
	out := make([]holding, n)
	p := body[holdingsHeader:]
	for i := range out {
		out[i].Ordinal = binary.BigEndian.Uint32(p)
		if entry == holdingsEntryV1 {
			out[i].Key = cache.SHA256(rafs.Digest(p[4:36]))
		} else {
			out[i].Key = cache.Key{Algo: rafs.DigestAlgo(p[4]), Digest: rafs.Digest(p[5:37])}
			if a := out[i].Key.Algo; !a.Valid() {
				return nil, fmt.Errorf("%w: unknown digest algorithm %d at entry %d", errHoldingsCorrupt, a, i)
			}
		}
		p = p[entry:]
		if i > 0 && out[i].Ordinal <= out[i-1].Ordinal {
			return nil, fmt.Errorf("%w: ordinals not ascending at entry %d", errHoldingsCorrupt, i)
		}
	}
	return out, nil
}
