package chunkapi

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"damselfly/rafs"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var b []byte
	b = AppendOKFrame(b, rafs.ChunkCompressed, 3)
	b = append(b, "abc"...)
	b = AppendFailedFrame(b, true, strings.Repeat("x", 2000))
	r := bytes.NewReader(b)
	f, p, buf, err := readFrame(r, nil)
	if err != nil || f.failed || f.flags != rafs.ChunkCompressed || string(p) != "abc" {
		t.Fatalf("ok frame: got %+v %q %v", f, p, err)
	}
	f, p, _, err = readFrame(r, buf)
	if err != nil || !f.failed || !f.transient || len(p) != MaxErrorMessage {
		t.Fatalf("failed frame: got %+v, %d bytes, %v; want transient, %d bytes", f, len(p), err, MaxErrorMessage)
	}
	if _, _, _, err := readFrame(r, nil); err != io.EOF {
		t.Errorf("after the last frame: got %v, want io.EOF", err)
	}
	for name, in := range map[string][]byte{
		"status":    {7},
		"flags":     {0, 0, 0, 0, 8, 0, 0, 0, 1, 0},
		"two algos": {0, 0, 0, 0, 6, 0, 0, 0, 1, 0},
		"zero":      {0, 0, 0, 0, 0, 0, 0, 0, 0},
		"huge":      {0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		"kind":      {1, 9, 0, 0, 0, 0, 0, 0, 0, 0},
		"msg size":  {1, 0, 0, 0, 0, 0, 0, 0, 8, 0},
	} {
		if _, _, _, err := readFrame(bytes.NewReader(in), nil); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
	if _, _, _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 0, 0, 0, 0, 0, 5, 'a'}), nil); err != io.ErrUnexpectedEOF {
		t.Errorf("cut payload: got %v, want io.ErrUnexpectedEOF", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(append(AppendOKFrame(nil, 0, 4), "abcd"...))
	f.Add(AppendFailedFrame(nil, false, "upstream 404"))
	f.Add(append(AppendOKFrame(nil, 1, 2), 'x'))
	f.Add([]byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var buf []byte
		for range 64 {
			fr, p, nb, err := readFrame(r, buf)
			if err != nil {
				return
			}
			buf = nb
			if int(fr.length) != len(p) || len(p) > rafs.MaxChunkSize || (fr.failed && len(p) > MaxErrorMessage) {
				t.Fatalf("frame %+v with %d bytes", fr, len(p))
			}
			if len(p) > len(data) {
				t.Fatalf("payload of %d bytes from %d bytes of input", len(p), len(data))
			}
		}
	})
}

func FuzzParseBatchRequest(f *testing.F) {
	d := strings.Repeat("ab", 32)
	f.Add([]byte(`{"repo":"a/b","blob":"sha256:` + d + `","chunks":[{"digest":"sha256:` + d + `","offset":0,"stored":10,"size":10,"flags":0,"ordinal":0}]}`))
	f.Add([]byte(`{"repo":"a/b","blob":"sha256:` + d + `","chunks":[{"digest":"sha256:` + d + `","offset":5,"stored":10,"size":100,"flags":1,"ordinal":3}]}`))
	f.Add([]byte(`{"repo":"a","blob":"x","chunks":[]}`))
	f.Add([]byte(`{"repo":"a","blob":"sha256:` + d + `","chunks":[{"stored":-1}]}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		repo, _, chunks, err := ParseRequest(data)
		if err != nil {
			return
		}
		if repo == "" || len(chunks) == 0 || len(chunks) > MaxBatchChunks {
			t.Fatalf("accepted repo %q with %d chunks", repo, len(chunks))
		}
		var total uint64
		for _, c := range chunks {
			if checkChunk(c) != nil {
				t.Fatalf("accepted chunk %+v that the client would refuse", c)
			}
			total += uint64(max(c.CompressedSize, c.Size))
		}
		if total > MaxBatchBytes {
			t.Fatalf("accepted %d bytes", total)
		}
	})
}
