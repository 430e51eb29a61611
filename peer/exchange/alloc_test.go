package exchange

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"runtime"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/piece"
)

// allocated returns the bytes f allocates per call, by the runtime's
// count (MemStats.TotalAlloc), over runs calls. The tests that use it
// are not parallel: parallel tests' bodies run only after them.
func allocated(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// bigChunk is a chunk of the largest size a request may name, which the
// tests' stores do not hold.
func bigChunk(compressed bool) rafs.Chunk {
	c := rafs.Chunk{Digest: rafs.Digest{7, 7, 7}, Size: rafs.MaxChunkSize, CompressedSize: rafs.MaxChunkSize}
	if compressed {
		c.Flags = rafs.ChunkCompressed
	}
	return c
}

// A request for a chunk the server does not hold (or holds only under
// the other digest algorithm) costs it no chunk-sized buffer: the
// response buffer is allocated once the Store found the chunk.
func TestLookupMissAllocatesNoChunk(t *testing.T) {
	held := makeChunks(40, 1, 64<<10, false)
	c := newCache(t, held)
	s := &Server{store: c, log: slog.New(slog.DiscardHandler)}
	flipped := held[0].Chunk
	flipped.Flags |= rafs.ChunkBlake3
	flipped.Size, flipped.CompressedSize = rafs.MaxChunkSize, rafs.MaxChunkSize
	// A 16 MiB chunk is asked for. The one held under the other
	// algorithm is read once (64 KiB) to see whether it is an entry the
	// release before wrote for this BLAKE3 chunk (cache.Get, CACHE.md):
	// that costs what is held, not what is asked for.
	for _, tt := range []struct {
		name  string
		c     rafs.Chunk
		limit uint64
	}{
		{"not held", bigChunk(false), 64 << 10},
		{"not held, compressed", bigChunk(true), 64 << 10},
		{"held under the other algorithm", flipped, 4 * 64 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rec []byte
			got := allocated(8, func() {
				bp := new([]byte)
				rec = s.lookup(rafs.Digest{1}, tt.c, bp, nil)
			})
			if len(rec) != recordHeaderSize || chunkStatus(rec[0]) == chunkOK {
				t.Fatalf("record %x, want a header without bytes", rec)
			}
			t.Logf("measured: %d bytes allocated per lookup", got)
			if got > tt.limit {
				t.Errorf("a lookup that found nothing allocated %d bytes, want at most %d", got, tt.limit)
			}
		})
	}
	// A chunk it holds is served whole, into a buffer of its size.
	bp := new([]byte)
	rec := s.lookup(rafs.Digest{1}, held[0].Chunk, bp, nil)
	if len(rec) != recordHeaderSize+len(held[0].stored) || !bytes.Equal(rec[recordHeaderSize:], held[0].stored) {
		t.Fatalf("held chunk: record of %d bytes, want header and %d stored bytes", len(rec), len(held[0].stored))
	}
}

// Every wire reader allocates in proportion to the bytes that arrived,
// not to the length a peer declared: a frame that promises the most the
// protocol allows and sends a few bytes costs little.
func TestReadersAllocateWhatArrives(t *testing.T) {
	few := bytes.Repeat([]byte{0xa5}, 10)
	record := func(c rafs.Chunk) []byte {
		b := appendResponseHead(nil, StatusOK, "")
		b = appendRecordHead(b, chunkOK, c.Compressed(), c.CompressedSize)
		return append(b, few...)
	}
	request := binary.LittleEndian.AppendUint32(nil, MaxRequestFrame)
	request = append(request, requestKind)
	request = append(request, few...)
	table := append([]byte{tableOK}, binary.LittleEndian.AppendUint32(nil, piece.MaxEncodedSize)...)
	table = append(table, few...)
	for _, tt := range []struct {
		name     string
		declared int
		limit    uint64
		read     func() error
	}{
		{"raw chunk record", rafs.MaxChunkSize, 256 << 10, func() error {
			var res FetchResult
			return readResponse(bytes.NewReader(record(bigChunk(false))), []rafs.Chunk{bigChunk(false)}, nil, &res)
		}},
		{"compressed chunk record", rafs.MaxChunkSize, 256 << 10, func() error {
			var res FetchResult
			return readResponse(bytes.NewReader(record(bigChunk(true))), []rafs.Chunk{bigChunk(true)}, nil, &res)
		}},
		{"request frame", MaxRequestFrame, 16 << 10, func() error {
			_, err := readRequest(bytes.NewReader(request))
			return err
		}},
		{"piece table", piece.MaxEncodedSize, 256 << 10, func() error {
			_, err := readTable(bytes.NewReader(table), rafs.Digest{2}, func() error { return nil })
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			got := allocated(8, func() { err = tt.read() })
			if err == nil {
				t.Fatal("a truncated frame was read without error")
			}
			t.Logf("measured: %d bytes allocated per read", got)
			if got > tt.limit {
				t.Errorf("declared %d bytes, sent %d: allocated %d bytes, want at most %d", tt.declared, len(few), got, tt.limit)
			}
		})
	}
}
