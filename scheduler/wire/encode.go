package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"damselfly/rafs"
	"damselfly/scheduler/internal/framebuf"
)

// Encode returns m as one frame: length, type, body. It fails only when
// the frame would be over MaxFrame. The other limits are the sender's to
// keep (ascending ordinals, counts); a frame that breaks them is refused
// by the receiver's decoder.
func Encode(m Message) ([]byte, error) {
	b, err := framebuf.Finish(m.appendBody(framebuf.Start(byte(m.Type()))), MaxFrame)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.Type(), err)
	}
	return b, nil
}

// WriteFrame encodes m and writes it to w in one Write.
func WriteFrame(w io.Writer, m Message) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write %s frame: %w", m.Type(), err)
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(min(len(s), math.MaxUint16)))
	return append(b, s[:min(len(s), math.MaxUint16)]...)
}

func appendOrdinals(b []byte, o []uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(o)))
	for _, v := range o {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func appendBlob(b []byte, d rafs.Digest) []byte { return append(b, d[:]...) }

func nonNegative(v int64) uint64 { return uint64(max(v, 0)) }

func (m *Register) appendBody(b []byte) []byte {
	b = append(b, byte(min(len(m.Addrs), math.MaxUint8)))
	for _, a := range m.Addrs[:min(len(m.Addrs), math.MaxUint8)] {
		b = appendString(b, a)
	}
	keys := make([]string, 0, len(m.Labels))
	for k := range m.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	keys = keys[:min(len(keys), math.MaxUint8)]
	b = append(b, byte(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m.Labels[k])
	}
	return binary.BigEndian.AppendUint64(b, nonNegative(m.UploadCapacity))
}

func (m *Heartbeat) appendBody(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(min(max(m.Load.ActiveUploads, 0), math.MaxUint32)))
	return binary.BigEndian.AppendUint64(b, nonNegative(m.Load.UploadBytesPerSec))
}

func (m *Announce) appendBody(b []byte) []byte {
	return appendOrdinals(appendBlob(b, m.Blob), m.Chunks)
}
func (m *Drop) appendBody(b []byte) []byte     { return appendOrdinals(appendBlob(b, m.Blob), m.Chunks) }
func (m *Abandon) appendBody(b []byte) []byte  { return appendOrdinals(appendBlob(b, m.Blob), m.Chunks) }
func (*Unregister) appendBody(b []byte) []byte { return b }

func (m *Route) appendBody(b []byte) []byte {
	return appendBytes(appendOrdinals(appendBlob(b, m.Blob), m.Chunks), m.Bytes)
}

func (m *RouteWait) appendBody(b []byte) []byte {
	b = appendOrdinals(appendBlob(b, m.Blob), m.Chunks)
	b = binary.BigEndian.AppendUint64(b, nonNegative(int64(m.MaxWait)))
	return appendBytes(b, m.Bytes)
}

// appendBytes appends a route's optional size, left out when 0.
func appendBytes(b []byte, n uint64) []byte {
	if n == 0 {
		return b
	}
	return binary.BigEndian.AppendUint64(b, n)
}

func (m *AnnounceFull) appendBody(b []byte) []byte {
	b = appendBlob(b, m.Blob)
	held := m.Held
	for len(held) > 0 && held[len(held)-1] == 0 {
		held = held[:len(held)-1] // trailing zero words carry nothing
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(held)))
	for _, w := range held {
		b = binary.BigEndian.AppendUint64(b, w)
	}
	return b
}

// Report flags.
const (
	reportOK       = 1 << 0
	reportBadBytes = 1 << 1
	okBanned       = 1 << 0
)

func (m *Report) appendBody(b []byte) []byte {
	b = appendString(b, m.About)
	o := &m.Outcome
	b = appendBlob(b, o.Blob)
	b = binary.BigEndian.AppendUint64(b, nonNegative(o.Bytes))
	b = binary.BigEndian.AppendUint64(b, nonNegative(int64(o.Duration)))
	var flags byte
	if o.OK {
		flags |= reportOK
	}
	if o.BadBytes {
		flags |= reportBadBytes
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, o.BadChunk)
	return appendOrdinals(b, o.Missing)
}

func (m *OK) appendBody(b []byte) []byte {
	var flags byte
	if m.Banned {
		flags |= okBanned
	}
	return append(b, flags)
}

func (m *Answer) appendBody(b []byte) []byte {
	a := &m.Answer
	b = append(b, byte(min(len(a.Parents), math.MaxUint8)))
	for _, p := range a.Parents[:min(len(a.Parents), math.MaxUint8)] {
		b = appendString(b, p.ID)
		b = append(b, byte(min(len(p.Addrs), math.MaxUint8)))
		for _, ad := range p.Addrs[:min(len(p.Addrs), math.MaxUint8)] {
			b = appendString(b, ad)
		}
		b = appendOrdinals(b, p.Chunks)
	}
	b = appendOrdinals(b, a.Origin)
	b = binary.BigEndian.AppendUint16(b, uint16(min(len(a.Wait), math.MaxUint16)))
	for _, w := range a.Wait[:min(len(a.Wait), math.MaxUint16)] {
		b = appendOrdinals(b, w.Chunks)
		b = binary.BigEndian.AppendUint64(b, nonNegative(int64(w.RetryAfter)))
	}
	return b
}

func (m *Error) appendBody(b []byte) []byte {
	b = append(b, byte(m.Code))
	msg := m.Message
	if len(msg) > MaxMessageLen {
		msg = strings.ToValidUTF8(msg[:MaxMessageLen], "")
	}
	return appendString(b, msg)
}
