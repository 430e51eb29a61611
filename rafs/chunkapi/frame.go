package chunkapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"damselfly/rafs"
)

// The batch response; PROTOCOL.md documents it byte by byte.
const (
	// ContentTypeChunks is the media type of a batch response body whose
	// chunks the peer has put in the node cache before sending them.
	ContentTypeChunks = "application/vnd.damselfly.chunks.v1"
	// ContentTypeChunksV2 is the media type of a batch response body in
	// the same frames, whose chunks the peer sends as soon as it has
	// verified them and puts in the node cache meanwhile. A client asks
	// for it with Accept.
	ContentTypeChunksV2 = "application/vnd.damselfly.chunks.v2"

	frameOK     = 0 // status: the chunk's stored bytes follow
	frameFailed = 1 // status: an error message follows; the response ends

	kindTransient = 0 // a failed frame's kind: asking again may succeed
	kindPermanent = 1 // a failed frame's kind: it will not

	// okHeaderLen is status + flags + length; failedHeaderLen adds kind.
	okHeaderLen     = 1 + 4 + 4
	failedHeaderLen = 1 + 1 + 4 + 4

	// MaxErrorMessage bounds a failed frame's message.
	MaxErrorMessage = 1 << 10

	// KnownFlags are the chunk flags a frame may carry.
	KnownFlags = rafs.ChunkCompressed | rafs.ChunkBlake3 | rafs.ChunkStoredDigest
)

// ErrProtocol marks a response that breaks the frame format.
var ErrProtocol = errors.New("malformed batch response")

// frame is one decoded frame header.
type frame struct {
	failed    bool
	transient bool   // failed frames
	flags     uint32 // ok frames
	length    uint32
}

// AppendOKFrame appends an ok frame's header for stored bytes with flags.
func AppendOKFrame(b []byte, flags uint32, n int) []byte {
	b = append(b, frameOK)
	b = binary.BigEndian.AppendUint32(b, flags)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// AppendFailedFrame appends a whole failed frame, its message cut to
// MaxErrorMessage bytes.
func AppendFailedFrame(b []byte, transient bool, msg string) []byte {
	if len(msg) > MaxErrorMessage {
		msg = msg[:MaxErrorMessage]
	}
	kind := byte(kindPermanent)
	if transient {
		kind = kindTransient
	}
	b = append(b, frameFailed, kind)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// readFrame reads one frame from r. The payload is read into buf, or,
// if that is too small, into memory that grows as the bytes arrive (up to
// rafs.MaxChunkSize); the returned payload aliases the buffer returned.
// Every field is checked before the payload is allocated or read. A
// stream that ends inside a frame gives io.ErrUnexpectedEOF; one that
// ends before it io.EOF; anything malformed ErrProtocol.
func readFrame(r io.Reader, buf []byte) (frame, []byte, []byte, error) {
	f, err := readFrameHead(r)
	if err != nil {
		return frame{}, nil, buf, err
	}
	p, buf, err := readPayload(r, int(f.length), buf)
	if err != nil {
		return frame{}, nil, buf, unexpected(err)
	}
	return f, p, buf, nil
}

// firstPayload is the memory a frame's payload gets before its bytes
// arrive when the scratch buffer is smaller: the length a frame declares
// is the sender's word, and a reader allocates for what it receives.
const firstPayload = 64 << 10

// readPayload reads n bytes from r into buf when it is large enough, else
// into memory that starts at firstPayload bytes and grows fourfold as
// they arrive (the last step exactly n): a sender that declares 16 MiB
// and stops costs what it sent, not what it declared. It returns the
// payload and the buffer to keep as scratch.
func readPayload(r io.Reader, n int, buf []byte) ([]byte, []byte, error) {
	if cap(buf) >= n {
		p := buf[:n]
		_, err := io.ReadFull(r, p)
		return p, buf, err
	}
	p := make([]byte, min(n, max(firstPayload, cap(buf))))
	filled := 0
	for {
		k, err := io.ReadFull(r, p[filled:])
		filled += k
		if err != nil {
			return nil, buf, err
		}
		if filled == n {
			return p, p, nil
		}
		next := make([]byte, min(n, 4*len(p)))
		copy(next, p[:filled])
		p = next
	}
}

// readFrameHead reads and checks the header of one frame from r, as
// readFrame does, leaving its payload (f.length bytes) to be read.
func readFrameHead(r io.Reader) (frame, error) {
	var hdr [failedHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return frame{}, err
	}
	var f frame
	switch hdr[0] {
	case frameOK:
		if _, err := io.ReadFull(r, hdr[1:okHeaderLen]); err != nil {
			return frame{}, unexpected(err)
		}
		f.flags = binary.BigEndian.Uint32(hdr[1:5])
		f.length = binary.BigEndian.Uint32(hdr[5:9])
		if f.flags&^KnownFlags != 0 || rafs.CheckChunkFlags(f.flags) != nil {
			return frame{}, fmt.Errorf("%w: chunk flags %#x: unknown, or two digest algorithms", ErrProtocol, f.flags)
		}
		if f.length == 0 || f.length > rafs.MaxChunkSize {
			return frame{}, fmt.Errorf("%w: chunk of %d bytes", ErrProtocol, f.length)
		}
	case frameFailed:
		if _, err := io.ReadFull(r, hdr[1:failedHeaderLen]); err != nil {
			return frame{}, unexpected(err)
		}
		f.failed = true
		switch hdr[1] {
		case kindTransient:
			f.transient = true
		case kindPermanent:
		default:
			return frame{}, fmt.Errorf("%w: unknown failure kind %d", ErrProtocol, hdr[1])
		}
		if flags := binary.BigEndian.Uint32(hdr[2:6]); flags != 0 {
			return frame{}, fmt.Errorf("%w: flags %#x on a failed frame", ErrProtocol, flags)
		}
		f.length = binary.BigEndian.Uint32(hdr[6:10])
		if f.length > MaxErrorMessage {
			return frame{}, fmt.Errorf("%w: error message of %d bytes", ErrProtocol, f.length)
		}
	default:
		return frame{}, fmt.Errorf("%w: unknown frame status %d", ErrProtocol, hdr[0])
	}
	return f, nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
