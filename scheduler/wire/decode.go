package wire

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"
	"unicode/utf8"

	"damselfly/scheduler"
	"damselfly/scheduler/internal/framebuf"
)

// ReadFrame reads one frame from r and decodes it. The length is checked
// against MaxFrame before the body is read, and the body's buffer grows
// as its bytes arrive (framebuf): a declared length is never allocated
// up front, so a sender that declares MaxFrame and sends little costs
// little.
func ReadFrame(r io.Reader) (Message, error) {
	buf, err := framebuf.ReadFrame(r, MaxFrame, ErrMalformed)
	if err != nil {
		return nil, err
	}
	return Decode(buf)
}

// Decode decodes a frame without its length field: type byte, then body.
// Every byte must be used.
func Decode(frame []byte) (Message, error) {
	if len(frame) < 1 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if len(frame) > MaxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes, more than %d", ErrMalformed, len(frame), MaxFrame)
	}
	t := Type(frame[0])
	d := &decoder{b: frame[1:], budget: MaxOrdinals}
	var m Message
	switch t {
	case TypeRegister:
		m = d.register()
	case TypeHeartbeat:
		m = &Heartbeat{Load: scheduler.Load{ActiveUploads: int(d.u32()), UploadBytesPerSec: d.i64("upload rate")}}
	case TypeAnnounce:
		m = &Announce{Blob: d.blob(), Chunks: d.ordinals("chunks")}
	case TypeAnnounceFull:
		m = d.announceFull()
	case TypeDrop:
		m = &Drop{Blob: d.blob(), Chunks: d.ordinals("chunks")}
	case TypeAbandon:
		m = &Abandon{Blob: d.blob(), Chunks: d.ordinals("chunks")}
	case TypeRoute:
		r := &Route{Blob: d.blob(), Chunks: d.ordinals("chunks")}
		r.Bytes = d.routeBytes()
		m = r
	case TypeRouteWait:
		r := &RouteWait{Blob: d.blob(), Chunks: d.ordinals("chunks"), MaxWait: time.Duration(d.i64("max wait"))}
		r.Bytes = d.routeBytes()
		m = r
	case TypeReport:
		m = d.report()
	case TypeUnregister:
		m = &Unregister{}
	case TypeOK:
		m = d.ok()
	case TypeAnswer:
		m = d.answer()
	case TypeError:
		m = d.errorMsg()
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

// routeBytes reads a route's optional last field, its chunks' stored
// size: absent (0), or 8 bytes, not 0 (a sender that does not know the
// size leaves the field out).
func (d *decoder) routeBytes() uint64 {
	if d.err != nil || len(d.b) == 0 {
		return 0
	}
	v := d.take(8)
	if v == nil {
		return 0
	}
	n := binary.BigEndian.Uint64(v)
	if n == 0 {
		d.fail("route size present but 0")
	}
	return n
}

// decoder reads a body front to back. The first failure sticks: later
// reads return zero values and allocate nothing.
type decoder struct {
	b      []byte
	err    error
	budget int // ordinals still allowed in this message
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
	d.b = nil
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("truncated: want %d more bytes, have %d", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// i64 reads a non-negative signed quantity.
func (d *decoder) i64(what string) int64 {
	v := d.u64()
	if v > math.MaxInt64 {
		d.fail("%s %d overflows", what, v)
		return 0
	}
	return int64(v)
}

func (d *decoder) blob() (out [32]byte) {
	copy(out[:], d.take(32))
	return out
}

func (d *decoder) str(what string, limit int) string {
	n := int(d.u16())
	if n > limit {
		d.fail("%s of %d bytes, more than %d", what, n, limit)
		return ""
	}
	v := d.take(n)
	if !utf8.Valid(v) {
		d.fail("%s is not UTF-8", what)
		return ""
	}
	return string(v)
}

// ordinals reads a strictly ascending list, counted against the
// message's budget before it is allocated.
func (d *decoder) ordinals(what string) []uint32 {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if int64(n) > int64(d.budget) {
		d.fail("%s: %d ordinals, more than the %d left of %d", what, n, d.budget, MaxOrdinals)
		return nil
	}
	if int64(n)*4 > int64(len(d.b)) {
		d.fail("%s: %d ordinals in %d bytes", what, n, len(d.b))
		return nil
	}
	d.budget -= int(n)
	if n == 0 {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = d.u32()
		if i > 0 && out[i] <= out[i-1] {
			d.fail("%s: ordinal %d after %d: not strictly ascending", what, out[i], out[i-1])
			return nil
		}
	}
	return out
}

func (d *decoder) register() *Register {
	m := &Register{}
	na := int(d.u8())
	if na > MaxAddrs {
		d.fail("%d addresses, more than %d", na, MaxAddrs)
		return m
	}
	if na > 0 {
		m.Addrs = make([]string, 0, na)
	}
	for range na {
		m.Addrs = append(m.Addrs, d.str("address", MaxStringLen))
	}
	nl := int(d.u8())
	if nl > MaxLabels {
		d.fail("%d labels, more than %d", nl, MaxLabels)
		return m
	}
	if nl > 0 {
		m.Labels = make(map[string]string, nl)
	}
	prev := ""
	for i := range nl {
		k := d.str("label key", MaxStringLen)
		v := d.str("label value", MaxStringLen)
		if d.err != nil {
			return m
		}
		if i > 0 && k <= prev {
			d.fail("label %q after %q: keys not strictly ascending", k, prev)
			return m
		}
		prev = k
		m.Labels[k] = v
	}
	m.UploadCapacity = d.i64("upload capacity")
	return m
}

func (d *decoder) announceFull() *AnnounceFull {
	m := &AnnounceFull{Blob: d.blob()}
	n := d.u32()
	if d.err != nil {
		return m
	}
	if n > MaxBitsetWords {
		d.fail("bitset of %d words, more than %d", n, MaxBitsetWords)
		return m
	}
	if int64(n)*8 > int64(len(d.b)) {
		d.fail("bitset of %d words in %d bytes", n, len(d.b))
		return m
	}
	m.Held = make(scheduler.Bitset, n)
	for i := range m.Held {
		m.Held[i] = d.u64()
	}
	return m
}

func (d *decoder) report() *Report {
	m := &Report{About: d.str("peer ID", MaxStringLen)}
	o := &m.Outcome
	o.Blob = d.blob()
	o.Bytes = d.i64("bytes")
	o.Duration = time.Duration(d.i64("duration"))
	flags := d.u8()
	if flags&^(reportOK|reportBadBytes) != 0 {
		d.fail("unknown report flags %#x", flags)
	}
	o.OK = flags&reportOK != 0
	o.BadBytes = flags&reportBadBytes != 0
	o.BadChunk = d.u32()
	o.Missing = d.ordinals("missing")
	return m
}

func (d *decoder) ok() *OK {
	flags := d.u8()
	if flags&^okBanned != 0 {
		d.fail("unknown flags %#x", flags)
	}
	return &OK{Banned: flags&okBanned != 0}
}

func (d *decoder) answer() *Answer {
	m := &Answer{}
	a := &m.Answer
	np := int(d.u8())
	if np > MaxParents {
		d.fail("%d parents, more than %d", np, MaxParents)
		return m
	}
	if np > 0 {
		a.Parents = make([]scheduler.Parent, 0, np)
	}
	for range np {
		var p scheduler.Parent
		p.ID = d.str("parent ID", MaxStringLen)
		na := int(d.u8())
		if na > MaxAddrs {
			d.fail("parent with %d addresses, more than %d", na, MaxAddrs)
			return m
		}
		for range na {
			p.Addrs = append(p.Addrs, d.str("parent address", MaxStringLen))
		}
		p.Chunks = d.ordinals("parent chunks")
		if d.err != nil {
			return m
		}
		a.Parents = append(a.Parents, p)
	}
	a.Origin = d.ordinals("origin")
	nw := int(d.u16())
	if nw > MaxWaits {
		d.fail("%d waits, more than %d", nw, MaxWaits)
		return m
	}
	// Each wait takes at least 12 bytes: check before allocating.
	if nw*12 > len(d.b) {
		d.fail("%d waits in %d bytes", nw, len(d.b))
		return m
	}
	if nw > 0 {
		a.Wait = make([]scheduler.Wait, 0, nw)
	}
	for range nw {
		w := scheduler.Wait{Chunks: d.ordinals("wait chunks")}
		w.RetryAfter = time.Duration(d.i64("retry after"))
		if d.err != nil {
			return m
		}
		a.Wait = append(a.Wait, w)
	}
	return m
}

func (d *decoder) errorMsg() *Error {
	m := &Error{Code: Code(d.u8())}
	m.Message = d.str("message", MaxMessageLen)
	return m
}
