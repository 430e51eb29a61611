package preheatwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

var roundTrips = []Message{
	&Request{Image: "docker://127.0.0.1:5000/app/x:rafs"},
	&Request{Image: "docker://r/x@sha256:00", PrefetchOnly: true},
	&Progress{Counts{ChunksDone: 1, ChunksTotal: 9, BytesDone: 10, BytesTotal: 900}},
	&Result{Counts: Counts{ChunksDone: 9, ChunksTotal: 9, BytesDone: 900, BytesTotal: 900}, OK: true},
	&Result{Message: "origin: 503"},
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range roundTrips {
		t.Run(m.Type().String(), func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFrame(&buf, m); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFrame(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Errorf("got %#v, want %#v", got, m)
			}
		})
	}
}

func TestEncodeLimits(t *testing.T) {
	t.Parallel()
	for _, m := range []Message{&Request{}, &Request{Image: strings.Repeat("x", MaxImageLen+1)}, &Request{Image: "\xff"}} {
		if _, err := Encode(m); err == nil {
			t.Errorf("encode %#v: got nil error", m)
		}
	}
	// A long message is cut to the limit, on a rune boundary.
	b, err := Encode(&Result{Message: strings.Repeat("é", MaxMessageLen)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b[4:])
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*Result).Message; len(got) > MaxMessageLen || len(got) < MaxMessageLen-1 {
		t.Errorf("message of %d bytes, want %d", len(got), MaxMessageLen)
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	req, _ := Encode(&Request{Image: "docker://r/x:y"})
	res, _ := Encode(&Result{OK: true})
	prog, _ := Encode(&Progress{})
	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"empty", nil},
		{"unknown type", []byte{0x7f}},
		{"truncated request", req[4 : len(req)-2]},
		{"trailing bytes", append(bytes.Clone(prog[4:]), 0)},
		{"request flags", append(bytes.Clone(req[4:len(req)-1]), 2)},
		{"result flags", func() []byte { b := bytes.Clone(res[4:]); b[33] = 0x80; return b }()},
		{"empty image", []byte{byte(TypeRequest), 0, 0, 0}},
		{"long string", append([]byte{byte(TypeRequest)}, binary.BigEndian.AppendUint16(nil, MaxImageLen+1)...)},
		{"done beyond total", append([]byte{byte(TypeProgress)}, binary.BigEndian.AppendUint64(make([]byte, 0, 32), 1)...)},
		{"bad utf8", []byte{byte(TypeRequest), 0, 1, 0xff, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.frame); !errors.Is(err, ErrMalformed) {
				t.Errorf("got %v, want ErrMalformed", err)
			}
		})
	}
	over := binary.BigEndian.AppendUint32(nil, MaxFrame+1)
	if _, err := ReadFrame(bytes.NewReader(over)); !errors.Is(err, ErrMalformed) {
		t.Errorf("oversized frame: got %v, want ErrMalformed", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range roundTrips {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[4:])
	}
	f.Add([]byte{byte(TypeResult)})
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			return
		}
		// What decodes encodes again to the same bytes.
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", m, err)
		}
		if !bytes.Equal(b[4:], frame) {
			t.Fatalf("re-encoded %x, decoded from %x", b[4:], frame)
		}
	})
}

// A frame that declares MaxFrame and sends 10 bytes of it costs about
// what arrived (framebuf's first step), not MaxFrame. Not parallel: it
// measures the process's allocations.
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, MaxFrame)
	in = append(in, byte(TypeProgress))
	in = append(in, make([]byte, 9)...)
	const runs = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := ReadFrame(bytes.NewReader(in)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
		}
	}
	runtime.ReadMemStats(&after)
	if got, limit := (after.TotalAlloc-before.TotalAlloc)/runs, uint64(MaxFrame/2+1024); got > limit {
		t.Errorf("allocated %d bytes a frame for 10 of %d declared, want at most %d", got, MaxFrame, limit)
	}
}
