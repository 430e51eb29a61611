package exchange

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/protocol"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// ProtocolID names version 1 of the chunk exchange; PROTOCOL.md documents
// every frame. A later incompatible version gets a new ID, and peers
// negotiate it through libp2p's multistream-select.
const ProtocolID protocol.ID = "/damselfly/chunks/1.0.0"

// Limits, checked before anything is allocated.
const (
	// MaxChunksPerBatch is the most chunks one request may name.
	MaxChunksPerBatch = 1024
	// MaxBatchBytes bounds the sum over a request's chunks of the most
	// bytes the server may send for each: max(stored length, size).
	MaxBatchBytes = 64 << 20
	// MaxMessageLen bounds the text in a response header.
	MaxMessageLen = 1024

	requestKind      = 1          // the only request kind
	requestFixedSize = 1 + 32 + 2 // kind, blob digest, chunk count
	chunkEntrySize   = 8 + 4 + 4 + 1 + 32
	responseHeadSize = 1 + 2     // status, message length
	recordHeaderSize = 1 + 1 + 4 // status, flags, stored length
	flagCompressed   = 1 << 0    // chunk entry and record flags
	flagBlake3       = 1 << 1    // chunk entry flag: the digest is BLAKE3's
	flagStored       = 1 << 2    // chunk entry flag: the digest is BLAKE3 of the stored bytes
	knownEntryFlags  = flagCompressed | flagBlake3 | flagStored
	lengthPrefixSize = 4
	minRequestFrame  = requestFixedSize + chunkEntrySize
	// MaxRequestFrame is the largest request frame body, in bytes.
	MaxRequestFrame = requestFixedSize + MaxChunksPerBatch*chunkEntrySize
)

// Status is a response's answer to the request as a whole.
type Status uint8

// Response statuses.
const (
	StatusOK          Status = 0 // chunk records follow, one per requested chunk
	StatusBusy        Status = 1 // too many streams from this peer or in all; try later or elsewhere
	StatusBadRequest  Status = 2 // the request broke the protocol or a limit; the message says how
	StatusUnavailable Status = 3 // the server is shutting down
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBusy:
		return "busy"
	case StatusBadRequest:
		return "bad request"
	case StatusUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// chunkStatus is the answer for one chunk.
type chunkStatus uint8

const (
	chunkOK       chunkStatus = 0 // the stored bytes follow
	chunkNotFound chunkStatus = 1 // the server does not hold the chunk
	chunkError    chunkStatus = 2 // the server holds it but could not read it
	// chunkOtherAlgo: the server does not hold the chunk, but holds the
	// same digest under the other digest algorithm, so the request's
	// description of the chunk is wrong. Not the server's fault. Only
	// SHA-256 and BLAKE3 have an other algorithm: a request that flips
	// the BLAKE3 bit turns one into the other. A blake3-stored digest has
	// no other form, and never gets this answer.
	chunkOtherAlgo chunkStatus = 3
)

// otherAlgo is k under the other digest algorithm: SHA-256 for BLAKE3
// and the reverse. A blake3-stored key has none (false).
func otherAlgo(k cache.Key) (cache.Key, bool) {
	switch k.Algo {
	case rafs.DigestBlake3:
		k.Algo = rafs.DigestSHA256
	case rafs.DigestSHA256:
		k.Algo = rafs.DigestBlake3
	default:
		return k, false
	}
	return k, true
}

// flipAlgo is c described with the other digest algorithm, as otherAlgo
// says; false for a blake3-stored chunk.
func flipAlgo(c rafs.Chunk) (rafs.Chunk, bool) {
	if c.Flags&rafs.ChunkStoredDigest != 0 {
		return c, false
	}
	c.Flags ^= rafs.ChunkBlake3
	return c, true
}

// Errors callers branch on.
var (
	// ErrInvalidRequest is wrapped by Fetch's error when the batch breaks
	// the protocol's rules or limits (nothing is sent), and by the server's
	// decoder for such a request.
	ErrInvalidRequest = errors.New("exchange: invalid request")
	// ErrBusy: the peer has too many streams open; ask later or elsewhere.
	ErrBusy = errors.New("exchange: peer busy")
	// ErrRefused: the peer answered that the request was bad. The message
	// is in the error text. It points at a version mismatch or a bug.
	ErrRefused = errors.New("exchange: peer refused the request")
	// ErrUnavailable: the peer is shutting down.
	ErrUnavailable = errors.New("exchange: peer shutting down")
	// ErrBadChunk: the peer sent stored bytes that fail verification. The
	// caller reports the peer to the scheduler and stops using it.
	ErrBadChunk = errors.New("exchange: peer sent a chunk that fails verification")
	// ErrProtocol: the peer's answer broke the protocol (unknown status,
	// impossible length). Like ErrBadChunk, it marks a broken or hostile
	// peer.
	ErrProtocol = errors.New("exchange: peer broke the protocol")
)

// request is a decoded request frame. Of each chunk, Digest, Flags,
// CompressedOffset, CompressedSize and Size travel; Index is set to the
// chunk's position in the batch and Blob to 0.
type request struct {
	blob   rafs.Digest
	chunks []rafs.Chunk
}

// allowance is the most stored bytes a server may send for c: its stored
// length as the requester knows it, or its size, for the raw form, when the
// server holds that instead.
func allowance(c rafs.Chunk) uint32 { return max(c.CompressedSize, c.Size) }

// checkBatch applies the protocol's rules to a batch of chunks.
func checkBatch(chunks []rafs.Chunk) error {
	if len(chunks) == 0 {
		return fmt.Errorf("%w: no chunks", ErrInvalidRequest)
	}
	if len(chunks) > MaxChunksPerBatch {
		return fmt.Errorf("%w: %d chunks, more than %d", ErrInvalidRequest, len(chunks), MaxChunksPerBatch)
	}
	var total uint64
	for i, c := range chunks {
		if err := checkChunk(c); err != nil {
			return fmt.Errorf("%w: chunk %d (%s): %v", ErrInvalidRequest, i, c.Digest, err)
		}
		total += uint64(allowance(c))
	}
	if total > MaxBatchBytes {
		return fmt.Errorf("%w: batch of up to %d bytes, more than %d", ErrInvalidRequest, total, MaxBatchBytes)
	}
	return nil
}

func checkChunk(c rafs.Chunk) error {
	switch {
	case rafs.CheckChunkFlags(c.Flags) != nil:
		return rafs.CheckChunkFlags(c.Flags)
	case c.Size == 0 || c.Size > rafs.MaxChunkSize:
		return fmt.Errorf("size %d outside 1..%d", c.Size, rafs.MaxChunkSize)
	case c.CompressedSize == 0 || c.CompressedSize > rafs.MaxChunkSize:
		return fmt.Errorf("stored length %d outside 1..%d", c.CompressedSize, rafs.MaxChunkSize)
	case !c.Compressed() && c.CompressedSize != c.Size:
		return fmt.Errorf("raw chunk with stored length %d and size %d", c.CompressedSize, c.Size)
	case c.CompressedOffset > ^uint64(0)-uint64(c.CompressedSize):
		return fmt.Errorf("offset %d overflows", c.CompressedOffset)
	}
	return nil
}

// appendRequest appends the request frame for blob and chunks, which
// checkBatch has accepted.
func appendRequest(b []byte, blob rafs.Digest, chunks []rafs.Chunk) []byte {
	body := requestFixedSize + len(chunks)*chunkEntrySize
	b = binary.LittleEndian.AppendUint32(b, uint32(body))
	b = append(b, requestKind)
	b = append(b, blob[:]...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(chunks)))
	for _, c := range chunks {
		b = binary.LittleEndian.AppendUint64(b, c.CompressedOffset)
		b = binary.LittleEndian.AppendUint32(b, c.CompressedSize)
		b = binary.LittleEndian.AppendUint32(b, c.Size)
		var f byte
		if c.Compressed() {
			f = flagCompressed
		}
		switch c.Algo() {
		case rafs.DigestBlake3:
			f |= flagBlake3
		case rafs.DigestStoredBlake3:
			f |= flagStored
		}
		b = append(b, f)
		b = append(b, c.Digest[:]...)
	}
	return b
}

// readRequest reads and checks one request frame. A frame that breaks a
// rule gives an error wrapping ErrInvalidRequest, found from the length
// prefix alone when the frame is too large or small; other errors are the
// reader's.
func readRequest(r io.Reader) (*request, error) {
	var lp [lengthPrefixSize]byte
	if _, err := io.ReadFull(r, lp[:]); err != nil {
		return nil, fmt.Errorf("read request length: %w", err)
	}
	n := binary.LittleEndian.Uint32(lp[:])
	if n < minRequestFrame || n > MaxRequestFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes, want %d..%d", ErrInvalidRequest, n, minRequestFrame, MaxRequestFrame)
	}
	body, err := readGrowing(r, int(n), firstRequestAlloc)
	if err != nil {
		return nil, fmt.Errorf("read request: %w", err)
	}
	return parseRequest(body)
}

// parseRequest decodes a request frame body, its length already checked
// against the limits.
func parseRequest(body []byte) (*request, error) {
	if body[0] != requestKind {
		return nil, fmt.Errorf("%w: unknown request kind %d", ErrInvalidRequest, body[0])
	}
	req := &request{}
	copy(req.blob[:], body[1:33])
	count := int(binary.LittleEndian.Uint16(body[33:35]))
	if want := requestFixedSize + count*chunkEntrySize; len(body) != want {
		return nil, fmt.Errorf("%w: %d chunks need a frame of %d bytes, got %d", ErrInvalidRequest, count, want, len(body))
	}
	req.chunks = make([]rafs.Chunk, count)
	p := body[requestFixedSize:]
	for i := range req.chunks {
		e := p[i*chunkEntrySize : (i+1)*chunkEntrySize]
		c := rafs.Chunk{
			Index:            uint32(i),
			CompressedOffset: binary.LittleEndian.Uint64(e[0:8]),
			CompressedSize:   binary.LittleEndian.Uint32(e[8:12]),
			Size:             binary.LittleEndian.Uint32(e[12:16]),
		}
		if e[16]&^knownEntryFlags != 0 {
			return nil, fmt.Errorf("%w: chunk %d: unknown flags %#x", ErrInvalidRequest, i, e[16])
		}
		if e[16]&flagCompressed != 0 {
			c.Flags |= rafs.ChunkCompressed
		}
		if e[16]&flagBlake3 != 0 {
			c.Flags |= rafs.ChunkBlake3
		}
		if e[16]&flagStored != 0 {
			c.Flags |= rafs.ChunkStoredDigest
		}
		copy(c.Digest[:], e[17:49])
		req.chunks[i] = c
	}
	if err := checkBatch(req.chunks); err != nil {
		return nil, err
	}
	return req, nil
}

// appendResponseHead appends a response header.
func appendResponseHead(b []byte, st Status, msg string) []byte {
	if len(msg) > MaxMessageLen {
		msg = msg[:MaxMessageLen]
	}
	b = append(b, byte(st))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// readResponseHead reads a response header. Anything but a known status
// and a message within MaxMessageLen is ErrProtocol.
func readResponseHead(r io.Reader) (Status, string, error) {
	var h [responseHeadSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", fmt.Errorf("read response header: %w", err)
	}
	st := Status(h[0])
	if st > StatusUnavailable {
		return 0, "", fmt.Errorf("%w: unknown response status %d", ErrProtocol, h[0])
	}
	n := binary.LittleEndian.Uint16(h[1:])
	if n > MaxMessageLen {
		return 0, "", fmt.Errorf("%w: response message of %d bytes, more than %d", ErrProtocol, n, MaxMessageLen)
	}
	msg, err := readGrowing(r, int(n), firstMessageAlloc)
	if err != nil {
		return 0, "", fmt.Errorf("read response message: %w", err)
	}
	return st, string(msg), nil
}

// appendRecordHead appends the header of one chunk's record.
func appendRecordHead(b []byte, st chunkStatus, compressed bool, n uint32) []byte {
	b = append(b, byte(st))
	var f byte
	if compressed {
		f = flagCompressed
	}
	b = append(b, f)
	return binary.LittleEndian.AppendUint32(b, n)
}

// readRecordHead reads the header of the record for c and checks it: a
// known status; for chunkOK a known flag and a length within c's
// allowance (and equal to c.Size for the raw form); otherwise no flags and
// no bytes. A record that fails is ErrProtocol.
func readRecordHead(r io.Reader, c rafs.Chunk) (st chunkStatus, compressed bool, n uint32, err error) {
	var h [recordHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, false, 0, fmt.Errorf("read chunk record: %w", err)
	}
	st, flags, n := chunkStatus(h[0]), h[1], binary.LittleEndian.Uint32(h[2:])
	switch {
	case st > chunkOtherAlgo:
		return 0, false, 0, fmt.Errorf("%w: unknown chunk status %d", ErrProtocol, h[0])
	case st != chunkOK && (flags != 0 || n != 0):
		return 0, false, 0, fmt.Errorf("%w: chunk status %d with flags %#x and %d bytes", ErrProtocol, st, flags, n)
	case st == chunkOtherAlgo && c.StoredDigest():
		return 0, false, 0, fmt.Errorf("%w: \"other algorithm\" for a blake3-stored chunk, which has none", ErrProtocol)
	case st != chunkOK:
		return st, false, 0, nil
	case flags&^flagCompressed != 0:
		return 0, false, 0, fmt.Errorf("%w: unknown chunk flags %#x", ErrProtocol, flags)
	case n == 0 || n > allowance(c):
		return 0, false, 0, fmt.Errorf("%w: %d stored bytes for a chunk allowed 1..%d", ErrProtocol, n, allowance(c))
	case flags&flagCompressed == 0 && n != c.Size:
		return 0, false, 0, fmt.Errorf("%w: raw form of %d bytes for a chunk of %d", ErrProtocol, n, c.Size)
	}
	return st, flags&flagCompressed != 0, n, nil
}

// What a wire reader allocates before the bytes arrive (readGrowing): a
// length prefix or header is a promise, and a peer that promises much
// and sends little must not cost this node what it promised.
const (
	firstRequestAlloc = 4 << 10  // a request of 83 chunks
	firstMessageAlloc = 256      // a response message
	firstChunkAlloc   = 64 << 10 // a chunk's stored bytes, a piece table
)

// readGrowing reads exactly n bytes from r into memory allocated as they
// arrive: a buffer of min(n, first) bytes, four times larger each time it
// fills, the last one exactly n. A reader that stops early has cost at
// most first + 6 times the bytes it sent. Errors are io.ReadFull's.
func readGrowing(r io.Reader, n, first int) ([]byte, error) {
	b := make([]byte, min(n, first))
	filled := 0
	for {
		k, err := io.ReadFull(r, b[filled:])
		filled += k
		if err != nil {
			if err == io.EOF && filled > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if filled == n {
			return b, nil
		}
		next := make([]byte, min(n, 4*len(b)))
		copy(next, b)
		b = next
	}
}

// served describes c as the server sent it: its form may differ from the
// requested one (the same content cached raw from one blob and compressed
// from another).
func served(c rafs.Chunk, compressed bool, n uint32) rafs.Chunk {
	c.CompressedSize = n
	c.Flags &^= rafs.ChunkCompressed
	if compressed {
		c.Flags |= rafs.ChunkCompressed
	}
	return c
}
