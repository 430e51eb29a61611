package convert

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// failAfter yields data, then err.
type failAfter struct {
	r   io.Reader
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// TestReadahead: the consumer sees the source's bytes in order, then
// exactly the source's error; a truncated stream is not a clean end.
func TestReadahead(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80000 bytes: several blocks and a partial one
	errBad := errors.New("bad stream")
	for _, tc := range []struct {
		name    string
		src     io.Reader
		wantErr error
	}{
		{"clean end", bytes.NewReader(data), io.EOF},
		{"one byte reads", iotest.OneByteReader(bytes.NewReader(data)), io.EOF},
		{"data with EOF", iotest.DataErrReader(bytes.NewReader(data)), io.EOF},
		{"truncated", &failAfter{bytes.NewReader(data), io.ErrUnexpectedEOF}, io.ErrUnexpectedEOF},
		{"failed", &failAfter{bytes.NewReader(data), errBad}, errBad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ra := newReadahead(t.Context(), tc.src, 4096, 3)
			defer ra.Close()
			var got bytes.Buffer
			buf := make([]byte, 1000)
			var err error
			for {
				var n int
				n, err = ra.Read(buf)
				got.Write(buf[:n])
				if err != nil {
					break
				}
			}
			if err != tc.wantErr {
				t.Errorf("got error %v, want %v", err, tc.wantErr)
			}
			if !bytes.Equal(got.Bytes(), data) {
				t.Errorf("got %d bytes, want the %d of the source", got.Len(), len(data))
			}
			// The error stays.
			if _, err2 := ra.Read(buf); err2 != err {
				t.Errorf("second read: got error %v, want %v", err2, err)
			}
		})
	}
}

// TestReadaheadStops: Close returns with the reader goroutine gone, and a
// cancelled context ends the stream with its error.
func TestReadaheadStops(t *testing.T) {
	t.Parallel()
	t.Run("close unread", func(t *testing.T) {
		ra := newReadahead(t.Context(), infinite{}, 1024, 2)
		ra.Close() // blocks until the goroutine has returned
		ra.Close()
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		ra := newReadahead(ctx, infinite{}, 1024, 2)
		defer ra.Close()
		cancel()
		buf := make([]byte, 4096)
		for range 1000 {
			if _, err := ra.Read(buf); err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("got error %v, want context.Canceled", err)
				}
				return
			}
		}
		t.Error("reads went on after the context was cancelled")
	})
}

type infinite struct{}

func (infinite) Read(p []byte) (int, error) { return len(p), nil }
