package framebuf

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

func TestRead(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, FirstStep - 1, FirstStep, FirstStep + 1, 3*FirstStep + 7, 1 << 20} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		// One byte at a time, then all at once, with bytes after the body.
		for _, r := range []io.Reader{
			iotest.OneByteReader(bytes.NewReader(append(want, 1, 2, 3))),
			bytes.NewReader(append(want, 1, 2, 3)),
		} {
			got, err := Read(r, n)
			if err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d: got %d bytes, not the body", n, len(got))
			}
			rest, _ := io.ReadAll(r)
			if !bytes.Equal(rest, []byte{1, 2, 3}) {
				t.Fatalf("n=%d: read past the body: %d bytes left, want 3", n, len(rest))
			}
		}
	}
}

func TestReadShort(t *testing.T) {
	t.Parallel()
	for _, in := range [][]byte{nil, {1}, make([]byte, FirstStep+10)} {
		if _, err := Read(bytes.NewReader(in), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%d of 1 MiB: got %v, want io.ErrUnexpectedEOF", len(in), err)
		}
	}
	boom := errors.New("boom")
	if _, err := Read(iotest.ErrReader(boom), 10); !errors.Is(err, boom) {
		t.Errorf("got %v, want the reader's error", err)
	}
}

// A body declared at 16 MiB of which 10 bytes arrive costs about the
// first step, not 16 MiB. Not parallel: it measures the process's
// allocations.
func TestReadAllocatesWhatArrives(t *testing.T) {
	const declared = 16 << 20
	in := make([]byte, 10)
	const runs = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := Read(bytes.NewReader(in), declared); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := (after.TotalAlloc - before.TotalAlloc) / runs; got > 2*FirstStep {
		t.Errorf("allocated %d bytes a read for 10 received of %d declared, want at most %d", got, declared, 2*FirstStep)
	}
}
