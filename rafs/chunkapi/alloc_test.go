package chunkapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// allocated runs f and returns the bytes allocated meanwhile (by the
// whole process: tests using it do not run in parallel).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A frame that declares 16 MiB and sends 100 bytes costs the reader what
// arrived, not what was declared.
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	in := append(AppendOKFrame(nil, 0, rafs.MaxChunkSize), make([]byte, 100)...)
	var err error
	got := allocated(func() { _, _, _, err = readFrame(bytes.NewReader(in), nil) })
	if err == nil {
		t.Fatal("a frame cut short was read whole")
	}
	if got > 512<<10 {
		t.Errorf("reading 100 bytes of a frame declaring %d allocated %d bytes, want at most 512 KiB", rafs.MaxChunkSize, got)
	}
}

// The batch client, against a proxy that promises a 16 MiB chunk (raw or
// compressed) and sends 100 bytes, allocates for the 100.
func TestChunkClientAllocatesWhatArrives(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		flags := uint32(0)
		if compressed {
			flags = rafs.ChunkCompressed
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ContentTypeChunksV2)
			w.Write(append(AppendOKFrame(nil, flags, rafs.MaxChunkSize), make([]byte, 100)...))
		}))
		c := rafs.Chunk{Digest: rafs.Digest{1}, CompressedSize: rafs.MaxChunkSize, Size: rafs.MaxChunkSize, Flags: flags}
		cc := NewClient(srv.URL, nil)
		var err error
		got := allocated(func() {
			err = cc.ReadChunks(context.Background(), registry.Ref{Repo: "a"}, rafs.Digest{2}, []rafs.Chunk{c}, func(int, rafs.Chunk, []byte) error { return nil })
		})
		srv.Close()
		if err == nil {
			t.Fatalf("compressed %v: a chunk cut short was delivered", compressed)
		}
		if got > 2<<20 {
			t.Errorf("compressed %v: 100 bytes of a chunk declared %d allocated %d bytes, want at most 2 MiB", compressed, rafs.MaxChunkSize, got)
		}
	}
}
