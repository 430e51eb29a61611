package chunkapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// The batch client reads blake3-stored chunks, compressed and raw, by
// their stored bytes: it delivers the stored bytes and the content,
// refuses a frame with a flipped byte as a digest mismatch, and refuses
// a request chunk with both algorithm bits before sending anything.
func TestClientStoredDigest(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := bytes.Repeat([]byte("stored digest "), 20000)
	frame := enc.EncodeAll(plain, nil)
	raw := []byte("raw bytes, stored as they are")
	chunks := []rafs.Chunk{
		{Digest: rafs.StoredSum(true, frame), Flags: rafs.ChunkCompressed | rafs.ChunkStoredDigest,
			CompressedSize: uint32(len(frame)), Size: uint32(len(plain))},
		{Digest: rafs.StoredSum(false, raw), Flags: rafs.ChunkStoredDigest,
			CompressedSize: uint32(len(raw)), Size: uint32(len(raw))},
	}
	serve := func(bodies ...[]byte) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, err := readBody(r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", ContentTypeChunksV2)
			for i, c := range req {
				w.Write(AppendOKFrame(nil, c.Flags&rafs.ChunkCompressed, len(bodies[i])))
				w.Write(bodies[i])
			}
		}))
	}
	srv := serve(frame, raw)
	defer srv.Close()
	cc := NewClient(srv.URL, nil)
	var gotPlain [][]byte
	err = cc.ReadChunksDecoded(context.Background(), registry.Ref{Repo: "a"}, rafs.Digest{2}, chunks,
		func(i int, c rafs.Chunk, stored, dec []byte) error {
			if c.Flags != chunks[i].Flags {
				t.Errorf("chunk %d delivered with flags %#x, want %#x", i, c.Flags, chunks[i].Flags)
			}
			gotPlain = append(gotPlain, bytes.Clone(dec))
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(gotPlain) != 2 || !bytes.Equal(gotPlain[0], plain) || !bytes.Equal(gotPlain[1], raw) {
		t.Fatalf("delivered %d chunks, or other content", len(gotPlain))
	}

	bad := bytes.Clone(frame)
	bad[len(bad)/2] ^= 0x08
	srv2 := serve(bad, raw)
	defer srv2.Close()
	err = NewClient(srv2.URL, nil).ReadChunksDecoded(context.Background(), registry.Ref{Repo: "a"}, rafs.Digest{2}, chunks,
		func(int, rafs.Chunk, []byte, []byte) error { t.Error("delivered a damaged frame"); return nil })
	if !errors.Is(err, rafs.ErrDigestMismatch) {
		t.Errorf("damaged frame: got %v, want ErrDigestMismatch", err)
	}

	both := chunks[:1:1]
	both[0].Flags |= rafs.ChunkBlake3
	err = cc.ReadChunksDecoded(context.Background(), registry.Ref{Repo: "a"}, rafs.Digest{2}, both,
		func(int, rafs.Chunk, []byte, []byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "two digest algorithms") {
		t.Errorf("chunk with both algorithm bits: got %v, want it refused", err)
	}
}

// readBody parses a batch request as the endpoint does.
func readBody(r *http.Request) ([]rafs.Chunk, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return nil, err
	}
	_, _, chunks, err := ParseRequest(buf.Bytes())
	return chunks, err
}

// ParseRequest accepts flag bit 2 and refuses it with bit 1.
func TestParseRequestStoredFlag(t *testing.T) {
	body := func(flags uint32) []byte {
		return []byte(`{"repo":"a","blob":"sha256:` + strings.Repeat("0", 64) + `","chunks":[{"digest":"sha256:` +
			strings.Repeat("1", 64) + `","offset":0,"stored":10,"size":10,"flags":` + string(rune('0'+flags)) + `,"ordinal":0}]}`)
	}
	if _, _, chunks, err := ParseRequest(body(rafs.ChunkStoredDigest)); err != nil || chunks[0].Algo() != rafs.DigestStoredBlake3 {
		t.Errorf("flags 4: %v", err)
	}
	if _, _, _, err := ParseRequest(body(rafs.ChunkStoredDigest | rafs.ChunkBlake3)); err == nil {
		t.Error("flags 6: accepted")
	}
}
