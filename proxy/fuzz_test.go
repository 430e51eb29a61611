package proxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	var b []byte
	b = appendOKFrame(b, rafs.ChunkCompressed, 3)
	b = append(b, "abc"...)
	b = appendFailedFrame(b, true, strings.Repeat("x", 2000))
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
		"status":   {7},
		"flags":    {0, 0, 0, 0, 4, 0, 0, 0, 1, 0},
		"zero":     {0, 0, 0, 0, 0, 0, 0, 0, 0},
		"huge":     {0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		"kind":     {1, 9, 0, 0, 0, 0, 0, 0, 0, 0},
		"msg size": {1, 0, 0, 0, 0, 0, 0, 0, 8, 0},
	} {
		if _, _, _, err := readFrame(bytes.NewReader(in), nil); !errors.Is(err, errProtocol) {
			t.Errorf("%s: got %v, want errProtocol", name, err)
		}
	}
	if _, _, _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 0, 0, 0, 0, 0, 5, 'a'}), nil); err != io.ErrUnexpectedEOF {
		t.Errorf("cut payload: got %v, want io.ErrUnexpectedEOF", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(append(appendOKFrame(nil, 0, 4), "abcd"...))
	f.Add(appendFailedFrame(nil, false, "upstream 404"))
	f.Add(append(appendOKFrame(nil, 1, 2), 'x'))
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
		repo, _, chunks, err := parseBatchRequest(data)
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

// A /v2/ path either parses into a route whose parts pass the checks
// the upstream requests rely on, or is refused with an OCI error code.
func FuzzParseV2(f *testing.F) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{"library/alpine/manifests/3.20", "a/b/blobs/" + d, "a/blobs/blobs/" + d, "a/tags/list",
		"a/referrers/" + d, "a/manifests/" + d, "../x/blobs/" + d, "a//b/manifests/x", "blobs/" + d, "", "/", "a/b/c/d/e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		rt, code, msg := parseV2(rest)
		if code != "" {
			if msg == "" || rt != (v2Route{}) {
				t.Fatalf("refused %q with code %s, message %q and route %+v", rest, code, msg, rt)
			}
			// quote keeps 128 bytes of the input, each at most 6 bytes
			// once JSON-escaped: the echo is bounded however long the
			// input.
			if len(msg) > 64+6*128 {
				t.Fatalf("error message of %d bytes echoes the input", len(msg))
			}
			return
		}
		if !registry.ValidRepo(rt.name) || strings.Contains(rt.name, "..") {
			t.Fatalf("%q: accepted repository %q", rest, rt.name)
		}
		switch rt.kind {
		case "blobs", "referrers":
			if !registry.ValidDigest(rt.ref) {
				t.Fatalf("%q: accepted digest %q", rest, rt.ref)
			}
		case "manifests":
			if !registry.ValidTag(rt.ref) && !registry.ValidDigest(rt.ref) {
				t.Fatalf("%q: accepted reference %q", rest, rt.ref)
			}
		case "tags":
			if rt.ref != "list" {
				t.Fatalf("%q: accepted tags/%q", rest, rt.ref)
			}
		default:
			t.Fatalf("%q: accepted kind %q", rest, rt.kind)
		}
		if got := rt.name + "/" + rt.kind + "/" + rt.ref; got != rest {
			t.Fatalf("%q parsed as %q", rest, got)
		}
	})
}

// A Range header parses into a non-empty range inside the blob, or is
// left to the origin.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-99", "bytes=10-", "bytes=-5", "bytes=990-5000", "bytes=5-4", "bytes=0-1,3-4",
		"bytes=-0", "bytes= 3-7", "items=0-1", "bytes=-9223372036854775808", "bytes=9223372036854775807-"} {
		f.Add(s, int64(1000))
	}
	f.Add("bytes=0-0", int64(1))
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size <= 0 {
			return // a blob of no bytes has no ranges to serve
		}
		off, end, ok := parseRange(h, size)
		if !ok {
			return
		}
		if off < 0 || end > size || off >= end {
			t.Fatalf("%q of %d bytes: [%d, %d)", h, size, off, end)
		}
	})
}
