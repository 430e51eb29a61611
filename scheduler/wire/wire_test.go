package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/scheduler"
)

var testBlob = rafs.Digest{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}

// sampleMessages is one of every message, with every field set.
func sampleMessages() []Message {
	return []Message{
		&Register{Addrs: []string{"/ip4/127.0.0.1/tcp/1", "/ip4/127.0.0.1/tcp/2"}, Labels: map[string]string{"host": "h1", "zone": "z"}, UploadCapacity: 1 << 30},
		&Register{},
		&Heartbeat{Load: scheduler.Load{ActiveUploads: 3, UploadBytesPerSec: 12345}},
		&Announce{Blob: testBlob, Chunks: []uint32{0, 5, 1 << 19}},
		&AnnounceFull{Blob: testBlob, Held: scheduler.BitsetOf(1, 70, 200)},
		&Drop{Blob: testBlob, Chunks: []uint32{7}},
		&Abandon{Blob: testBlob, Chunks: []uint32{1, 2}},
		&Route{Blob: testBlob, Chunks: []uint32{1, 2, 3}},
		&RouteWait{Blob: testBlob, Chunks: []uint32{4, 9}, MaxWait: 750 * time.Millisecond},
		&Route{Blob: testBlob, Chunks: []uint32{1, 2, 3}, Bytes: 3 << 20},
		&RouteWait{Blob: testBlob, Chunks: []uint32{4, 9}, MaxWait: time.Second, Bytes: 1},
		&Report{About: "12D3KooWabc", Outcome: scheduler.Outcome{Blob: testBlob, Bytes: 99, Duration: time.Second, OK: false, BadBytes: true, BadChunk: 4, Missing: []uint32{8, 9}}},
		&Report{About: "x", Outcome: scheduler.Outcome{Blob: testBlob, OK: true}},
		&Unregister{},
		&OK{},
		&OK{Banned: true},
		&Answer{Answer: scheduler.Answer{
			Parents: []scheduler.Parent{{ID: "p1", Addrs: []string{"/ip4/127.0.0.1/tcp/9"}, Chunks: []uint32{1, 3}}, {ID: "p2", Chunks: []uint32{2}}},
			Origin:  []uint32{4},
			Wait:    []scheduler.Wait{{Chunks: []uint32{5, 6}, RetryAfter: 250 * time.Millisecond}},
		}},
		&Answer{},
		&Error{Code: CodeUnknownPeer, Message: "register again"},
		&Error{Code: CodeTooManyPeers, Message: "register later"},
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range sampleMessages() {
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
			if buf.Len() != 0 {
				t.Errorf("%d bytes left after the frame", buf.Len())
			}
		})
	}
}

func frame(t Type, body ...[]byte) []byte {
	return append([]byte{byte(t)}, bytes.Join(body, nil)...)
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	blob := testBlob[:]
	tests := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", nil, "empty frame"},
		{"unknown type", frame(0x42), "unknown message type"},
		{"truncated blob", frame(TypeAnnounce, blob[:10]), "truncated"},
		{"huge ordinal count", frame(TypeAnnounce, blob, be32(1<<31)), "more than"},
		{"count beyond bytes", frame(TypeRoute, blob, be32(100), be32(1)), "ordinals in"},
		{"descending", frame(TypeDrop, blob, be32(2), be32(5), be32(4)), "ascending"},
		{"duplicate", frame(TypeDrop, blob, be32(2), be32(5), be32(5)), "ascending"},
		{"trailing bytes", frame(TypeUnregister, []byte{0}), "after the body"},
		{"too many addrs", frame(TypeRegister, []byte{MaxAddrs + 1}), "addresses"},
		{"long string", frame(TypeRegister, []byte{1, 0x10, 0}), "more than"},
		{"bad utf8", frame(TypeRegister, []byte{1, 0, 1, 0xff}), "UTF-8"},
		{"labels unsorted", frame(TypeRegister, []byte{0, 2, 0, 1, 'b', 0, 0, 0, 1, 'a', 0, 0}, make([]byte, 8)), "ascending"},
		{"negative capacity", frame(TypeRegister, []byte{0, 0}, bytes.Repeat([]byte{0xff}, 8)), "overflows"},
		{"huge bitset", frame(TypeAnnounceFull, blob, be32(MaxBitsetWords+1)), "more than"},
		{"bitset beyond bytes", frame(TypeAnnounceFull, blob, be32(3), make([]byte, 8)), "words in"},
		{"route wait without max wait", frame(TypeRouteWait, blob, be32(1), be32(3)), "truncated"},
		{"route size 0", frame(TypeRoute, blob, be32(1), be32(3), make([]byte, 8)), "present but 0"},
		{"route size cut", frame(TypeRoute, blob, be32(1), be32(3), []byte{0, 0, 1}), "truncated"},
		{"route wait size cut", frame(TypeRouteWait, blob, be32(0), make([]byte, 8), []byte{1}), "truncated"},
		{"negative max wait", frame(TypeRouteWait, blob, be32(0), bytes.Repeat([]byte{0xff}, 8)), "overflows"},
		{"report flags", frame(TypeReport, []byte{0, 0}, blob, make([]byte, 16), []byte{0x80}, make([]byte, 8)), "flags"},
		{"ok flags", frame(TypeOK, []byte{2}), "flags"},
		{"too many parents", frame(TypeAnswer, []byte{MaxParents + 1}), "parents"},
		{"too many waits", frame(TypeAnswer, []byte{0}, be32(0), []byte{0xff, 0xff}), "waits"},
		{"waits beyond bytes", frame(TypeAnswer, []byte{0}, be32(0), []byte{0, 10}), "waits in"},
		{"long message", frame(TypeError, []byte{1, 0x08, 0}), "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.frame)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrMalformed mentioning %q", err, tt.want)
			}
		})
	}
}

func TestOrdinalBudget(t *testing.T) {
	t.Parallel()
	// Two lists that each fit but together exceed MaxOrdinals.
	n := MaxOrdinals/2 + 1
	list := func() []uint32 {
		o := make([]uint32, n)
		for i := range o {
			o[i] = uint32(i)
		}
		return o
	}
	m := &Answer{Answer: scheduler.Answer{Origin: list(), Wait: []scheduler.Wait{{Chunks: list()}}}}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(b[4:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("got %v, want ErrMalformed for %d ordinals", err, 2*n)
	}
}

func TestReadFrameRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		in   []byte
		want error
	}{
		{"oversized length", be32(MaxFrame + 1), ErrMalformed},
		{"zero length", be32(0), ErrMalformed},
		{"short header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"short body", append(be32(10), 1, 2), io.ErrUnexpectedEOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadFrame(bytes.NewReader(tt.in)); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeRefusesOversized(t *testing.T) {
	t.Parallel()
	m := &AnnounceFull{Blob: testBlob, Held: make(scheduler.Bitset, MaxFrame/8+1)}
	m.Held[len(m.Held)-1] = 1
	if _, err := Encode(m); err == nil {
		t.Error("got nil error for a frame over MaxFrame")
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	e := &Error{Code: CodeRateLimited, Message: "busy"}
	if got, want := e.Error(), "scheduler: rate limited: busy"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[4:])
	}
	f.Add([]byte{byte(TypeAnnounce)})
	f.Add(frame(TypeAnswer, []byte{1, 0, 1, 'p', 1, 0, 0}, be32(0), be32(0), []byte{0, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// What decodes encodes back to the same bytes, except that
		// AnnounceFull drops trailing zero words.
		again, err := Encode(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if m.Type() != TypeAnnounceFull && !bytes.Equal(again[4:], b) {
			t.Fatalf("re-encoded %x, want %x", again[4:], b)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	for _, m := range sampleMessages()[:4] {
		b, _ := Encode(m)
		f.Add(b)
	}
	f.Add(be32(MaxFrame + 1))
	f.Add(append(be32(MaxFrame), byte(TypeAnnounce), 1, 2)) // declares the most, sends little
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ReadFrame(bytes.NewReader(b))
	})
}

// A frame that declares MaxFrame and sends 10 bytes of it costs about
// what arrived, not MaxFrame: the body's buffer grows as bytes arrive.
// Not parallel: it measures the process's allocations.
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	in := append(be32(MaxFrame), byte(TypeAnnounce))
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
	if got, limit := (after.TotalAlloc-before.TotalAlloc)/runs, uint64(16<<10); got > limit {
		t.Errorf("allocated %d bytes a frame for 10 of %d declared, want at most %d", got, MaxFrame, limit)
	}
}
