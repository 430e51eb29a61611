package exchange

import (
	"bytes"
	"errors"
	"testing"

	"damselfly/rafs"
)

// FuzzReadRequest feeds arbitrary bytes to the server's request decoder:
// it must not panic, and what it accepts must satisfy the batch rules and
// encode back to the same frame.
func FuzzReadRequest(f *testing.F) {
	tcs := append(makeChunks(30, 2, 256, true), makeChunks(31, 1, 256, false)...)
	valid := appendRequest(nil, rafs.Digest{1}, chunksOf(tcs))
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(appendRequest(nil, rafs.Digest{2}, chunksOf(storedChunks(tcs))))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	for _, off := range []int{lengthPrefixSize, lengthPrefixSize + 33, lengthPrefixSize + requestFixedSize + 16} {
		b := bytes.Clone(valid)
		b[off] ^= 0xff
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := readRequest(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := checkBatch(req.chunks); err != nil {
			t.Fatalf("accepted a batch that breaks the rules: %v", err)
		}
		again := appendRequest(nil, req.blob, req.chunks)
		if !bytes.Equal(again, data[:len(again)]) {
			t.Fatalf("re-encoded frame differs")
		}
	})
}

// FuzzReadResponse feeds arbitrary bytes to the client's response reader
// for a fixed request: it must not panic, must deliver only chunks that
// verify, and must account for every chunk.
func FuzzReadResponse(f *testing.F) {
	tcs := append(makeChunks(32, 2, 256, true), makeChunks(33, 1, 256, false)...)
	for _, tc := range responseCases(tcs) {
		f.Add(tc.stream)
	}
	chunks := chunksOf(tcs)
	f.Fuzz(func(t *testing.T, data []byte) {
		var res FetchResult
		delivered := 0
		err := readResponse(bytes.NewReader(data), chunks, func(c rafs.Chunk, stored []byte) error {
			dst := make([]byte, c.Size)
			if err := rafs.DecodeChunk(c, stored, dst); err != nil {
				t.Fatalf("delivered a chunk that fails verification: %v", err)
			}
			delivered++
			return nil
		}, &res)
		if delivered != res.Delivered {
			t.Fatalf("%d deliveries, result says %d", delivered, res.Delivered)
		}
		if n := res.Delivered + len(res.Missing) + len(res.Bad) + len(res.Unanswered); n != len(chunks) {
			t.Fatalf("result accounts for %d chunks, want %d", n, len(chunks))
		}
		if len(res.Bad) > 0 && !errors.Is(err, ErrBadChunk) {
			t.Fatalf("bad chunk without ErrBadChunk: %v", err)
		}
	})
}
