// Package framebuf is the one frame codec of the scheduler's two
// protocols: Start and Finish write a frame's length and type around a
// body, ReadFrame reads one back, and Read reads the body without
// trusting the length: the buffer grows as bytes arrive, so a sender that
// declares the largest frame and sends a few bytes costs a few bytes (and
// one small first step), not the declared length. The scheduler protocol
// (scheduler/wire) and the preheat protocol (scheduler/preheatwire) both
// read their frames with it.
package framebuf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// FirstStep is the most Read allocates before any byte of the body has
// arrived. Most frames (heartbeats, reports, short routes) fit in it.
const FirstStep = 4 << 10

// Read reads exactly n bytes from r. It allocates FirstStep bytes (or n,
// if smaller) at first and doubles the buffer, never beyond n, each time
// the bytes received fill it: so it has allocated at most about twice
// the bytes received plus FirstStep, however large n is. A body cut
// short returns io.ErrUnexpectedEOF (or r's error) with nil.
func Read(r io.Reader, n int) ([]byte, error) {
	if n < 0 {
		return nil, errors.New("framebuf: negative length")
	}
	buf := make([]byte, 0, min(n, FirstStep))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), n-len(buf)))
		}
		// Read up to the end of the room already paid for, never past
		// the frame: slices.Grow may round the capacity up.
		m, err := io.ReadFull(r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// Frames are a 4-byte big-endian length, then that many bytes: a type
// byte and the message body. Both protocols frame this way; each keeps
// its own message set, limit and error.

// Start returns the start of a frame of message type t, with room for the
// length that Finish fills in; append the body to it.
func Start(t byte) []byte {
	b := make([]byte, 4, 64)
	return append(b, t)
}

// Finish sets the length of frame b, begun by Start, and returns it; a
// frame whose type and body are over limit bytes is refused.
func Finish(b []byte, limit int) ([]byte, error) {
	n := len(b) - 4
	if n > limit {
		return nil, fmt.Errorf("frame of %d bytes, more than %d", n, limit)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	return b, nil
}

// ReadFrame reads one frame from r and returns its type byte and body.
// The length is checked against 1..limit before the body is read (a bad
// one is reported wrapping malformed, the protocol's own sentinel), and
// the body is read with Read, so a declared length is never allocated up
// front.
func ReadFrame(r io.Reader, limit int, malformed error) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("read frame length: %w", err)
	}
	n := binary.BigEndian.Uint32(h[:])
	if n < 1 || n > uint32(limit) {
		return nil, fmt.Errorf("%w: length %d outside 1..%d", malformed, n, limit)
	}
	buf, err := Read(r, int(n))
	if err != nil {
		return nil, fmt.Errorf("read %d-byte frame: %w", n, err)
	}
	return buf, nil
}
