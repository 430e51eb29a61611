// Package framebuf reads the body of a length-prefixed frame without
// trusting the length: the buffer grows as bytes arrive, so a sender that
// declares the largest frame and sends a few bytes costs a few bytes (and
// one small first step), not the declared length. The scheduler protocol
// (scheduler/wire) and the preheat protocol (scheduler/preheatwire) both
// read their frames with it.
package framebuf

import (
	"errors"
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
