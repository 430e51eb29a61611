package preheatwire

import (
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"

	"damselfly/scheduler/internal/framebuf"
)

// flagOK and flagPrefetchOnly are the defined bits of the flags bytes.
const (
	flagPrefetchOnly = 1 << 0
	flagOK           = 1 << 0
)

// WriteFrame encodes m and writes it to w as one frame.
func WriteFrame(w io.Writer, m Message) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Encode returns m as a frame, length field included. It fails when m
// breaks a limit.
func Encode(m Message) ([]byte, error) {
	b := framebuf.Start(byte(m.Type()))
	switch m := m.(type) {
	case *Request:
		if len(m.Image) == 0 || len(m.Image) > MaxImageLen || !utf8.ValidString(m.Image) {
			return nil, fmt.Errorf("preheatwire: image reference of %d bytes: want 1 to %d bytes of UTF-8", len(m.Image), MaxImageLen)
		}
		b = appendString(b, m.Image)
		var f byte
		if m.PrefetchOnly {
			f |= flagPrefetchOnly
		}
		b = append(b, f)
	case *Progress:
		b = appendCounts(b, m.Counts)
	case *Result:
		b = appendCounts(b, m.Counts)
		var f byte
		if m.OK {
			f |= flagOK
		}
		b = append(b, f)
		b = appendString(b, truncate(m.Message, MaxMessageLen))
	default:
		return nil, fmt.Errorf("preheatwire: cannot encode %T", m)
	}
	b, err := framebuf.Finish(b, MaxFrame)
	if err != nil {
		return nil, fmt.Errorf("preheatwire: %w", err)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendCounts(b []byte, c Counts) []byte {
	for _, v := range []uint64{c.ChunksDone, c.ChunksTotal, c.BytesDone, c.BytesTotal} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	return b
}

// truncate cuts s to at most n bytes on a rune boundary, keeping it valid
// UTF-8 (invalid bytes are replaced).
func truncate(s string, n int) string {
	s = string([]rune(s)) // replaces invalid UTF-8
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ReadFrame reads one frame from r and decodes it. The length is checked
// against MaxFrame before the body is read, and the body's buffer grows
// as its bytes arrive (framebuf): a declared length is never allocated
// up front.
func ReadFrame(r io.Reader) (Message, error) {
	buf, err := framebuf.ReadFrame(r, MaxFrame, ErrMalformed)
	if err != nil {
		return nil, err
	}
	return Decode(buf)
}

// Decode decodes a frame without its length field: the type byte, then
// the body, which must be used to its last byte.
func Decode(frame []byte) (Message, error) {
	if len(frame) < 1 || len(frame) > MaxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes outside 1..%d", ErrMalformed, len(frame), MaxFrame)
	}
	t := Type(frame[0])
	d := &decoder{b: frame[1:]}
	var m Message
	switch t {
	case TypeRequest:
		img := d.str("image", MaxImageLen)
		f := d.flags(flagPrefetchOnly)
		if d.err == nil && img == "" {
			d.fail("empty image reference")
		}
		m = &Request{Image: img, PrefetchOnly: f&flagPrefetchOnly != 0}
	case TypeProgress:
		m = &Progress{Counts: d.counts()}
	case TypeResult:
		c := d.counts()
		f := d.flags(flagOK)
		m = &Result{Counts: c, OK: f&flagOK != 0, Message: d.str("message", MaxMessageLen)}
	default:
		return nil, fmt.Errorf("%w: unknown message type %#x", ErrMalformed, uint8(t))
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the body", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrMalformed, t, d.err)
	}
	return m, nil
}

// decoder reads fields off b; the first failure sticks and later reads
// return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, a...)
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("%s: %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u64(what string) uint64 {
	b := d.take(8, what)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (d *decoder) str(what string, limit int) string {
	h := d.take(2, what)
	if h == nil {
		return ""
	}
	n := int(binary.BigEndian.Uint16(h))
	if n > limit {
		d.fail("%s: %d bytes, more than %d", what, n, limit)
		return ""
	}
	b := d.take(n, what)
	if b == nil {
		return ""
	}
	if !utf8.Valid(b) {
		d.fail("%s: not UTF-8", what)
		return ""
	}
	return string(b)
}

func (d *decoder) flags(known byte) byte {
	b := d.take(1, "flags")
	if b == nil {
		return 0
	}
	if b[0]&^known != 0 {
		d.fail("flags %#x: undefined bits set", b[0])
	}
	return b[0]
}

func (d *decoder) counts() Counts {
	c := Counts{
		ChunksDone: d.u64("chunks done"), ChunksTotal: d.u64("chunks total"),
		BytesDone: d.u64("bytes done"), BytesTotal: d.u64("bytes total"),
	}
	if d.err == nil && (c.ChunksDone > c.ChunksTotal || c.BytesDone > c.BytesTotal) {
		d.fail("done beyond total")
	}
	return c
}
