package exchange

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"damselfly/rafs"
)

func TestRequestRoundTrip(t *testing.T) {
	t.Parallel()
	tcs := append(makeChunks(20, 2, 64<<10, true), makeChunks(21, 1, 64<<10, false)...)
	tcs = append(tcs, blake3Chunks(makeChunks(22, 2, 64<<10, true))...)
	chunks := chunksOf(tcs)
	chunks[2].CompressedOffset = 1 << 40
	frame := appendRequest(nil, rafs.Digest{7}, chunks)
	if len(frame) != lengthPrefixSize+requestFixedSize+len(chunks)*chunkEntrySize {
		t.Fatalf("frame of %d bytes", len(frame))
	}
	req, err := readRequest(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	if req.blob != (rafs.Digest{7}) {
		t.Errorf("blob %s, want {7}", req.blob)
	}
	for i, c := range chunks {
		c.Index, c.Blob = uint32(i), 0
		if req.chunks[i] != c {
			t.Errorf("chunk %d: got %+v, want %+v", i, req.chunks[i], c)
		}
	}
}

func TestReadRequestLimits(t *testing.T) { // not parallel: counts allocations
	// The decoder must refuse an oversized frame from its length alone,
	// without waiting for (or allocating) the body.
	huge := []byte{0xff, 0xff, 0xff, 0x7f}
	if _, err := readRequest(bytes.NewReader(huge)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("got %v, want ErrInvalidRequest", err)
	}
	if _, err := readRequest(bytes.NewReader(nil)); !errors.Is(err, io.EOF) {
		t.Fatalf("empty: got %v, want EOF", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		readRequest(bytes.NewReader(huge))
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("refusing 10 oversized frames allocated %d bytes", n)
	}
}

// responseCase is a response stream for the chunks of a request and what
// reading it must give.
type responseCase struct {
	name      string
	stream    []byte
	delivered int
	missing   int
	err       error // nil, or what the error wraps
}

func responseCases(tcs []testChunk) []responseCase {
	ok := func(b []byte, tc testChunk) []byte {
		b = appendRecordHead(b, chunkOK, tc.Compressed(), uint32(len(tc.stored)))
		return append(b, tc.stored...)
	}
	head := appendResponseHead(nil, StatusOK, "")
	all := head
	for _, tc := range tcs {
		all = ok(all, tc)
	}
	flipped := bytes.Clone(all)
	flipped[len(head)+recordHeaderSize+len(tcs[0].stored)/2] ^= 1
	missing := appendRecordHead(bytes.Clone(head), chunkNotFound, false, 0)
	missing = ok(missing, tcs[1])
	missing = appendRecordHead(missing, chunkError, false, 0)
	return []responseCase{
		{"all", all, len(tcs), 0, nil},
		{"missing", missing, 1, 2, nil},
		{"flipped byte", flipped, 0, 0, ErrBadChunk},
		{"truncated", all[:len(all)-1], 2, 0, io.ErrUnexpectedEOF},
		{"busy", appendResponseHead(nil, StatusBusy, ""), 0, 0, ErrBusy},
		{"bad request", appendResponseHead(nil, StatusBadRequest, "no"), 0, 0, ErrRefused},
		{"unavailable", appendResponseHead(nil, StatusUnavailable, ""), 0, 0, ErrUnavailable},
		{"unknown status", []byte{9, 0, 0}, 0, 0, ErrProtocol},
		{"long message", []byte{2, 0xff, 0xff}, 0, 0, ErrProtocol},
		{"unknown chunk status", append(bytes.Clone(head), 7, 0, 0, 0, 0, 0), 0, 0, ErrProtocol},
		{"not found with bytes", appendRecordHead(bytes.Clone(head), chunkNotFound, false, 5), 0, 0, ErrProtocol},
		{"zero length", appendRecordHead(bytes.Clone(head), chunkOK, true, 0), 0, 0, ErrProtocol},
		{"over allowance", appendRecordHead(bytes.Clone(head), chunkOK, true, 1<<30), 0, 0, ErrProtocol},
		{"raw of wrong size", appendRecordHead(bytes.Clone(head), chunkOK, false, 10), 0, 0, ErrProtocol},
		{"unknown flags", append(bytes.Clone(head), 0, 0x82, 1, 0, 0, 0), 0, 0, ErrProtocol},
		{"empty", nil, 0, 0, io.EOF},
	}
}

func TestReadResponse(t *testing.T) {
	t.Parallel()
	tcs := append(makeChunks(22, 2, 64<<10, true), makeChunks(23, 1, 64<<10, false)...)
	for _, tc := range responseCases(tcs) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			col := &collector{t: t}
			var res FetchResult
			err := readResponse(bytes.NewReader(tc.stream), chunksOf(tcs), col.deliver, &res)
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if res.Delivered != tc.delivered || len(col.got) != tc.delivered || len(res.Missing) != tc.missing {
				t.Fatalf("got %d delivered (%d calls), %d missing; want %d, %d", res.Delivered, len(col.got), len(res.Missing), tc.delivered, tc.missing)
			}
			n := res.Delivered + len(res.Missing) + len(res.Bad) + len(res.Unanswered)
			if n != len(tcs) {
				t.Fatalf("result accounts for %d chunks, want %d: %+v", n, len(tcs), res)
			}
		})
	}
}
