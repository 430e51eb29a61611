package proxy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

// digestHolds checks c's digest independently of the client: of the
// stored bytes for a blake3-stored chunk, of the content otherwise.
func digestHolds(c rafs.Chunk, stored, plain []byte) bool {
	if c.StoredDigest() {
		return rafs.StoredSum(c.Compressed(), stored) == c.Digest
	}
	return c.Algo().Sum(plain) == c.Digest
}

// readAll reads chunks through a chunkapi.Client, checking each delivered
// chunk, and returns how many were delivered and the error.
func readAll(t *testing.T, cc *chunkapi.Client, up registry.Ref, img image, chunks []rafs.Chunk) (int, error) {
	t.Helper()
	n := 0
	plain := make([]byte, rafs.MaxChunkSize)
	err := cc.ReadChunks(testCtx(t), up, img.blob, chunks, func(i int, c rafs.Chunk, stored []byte) error {
		if i != n {
			t.Fatalf("delivered chunk %d, want %d", i, n)
		}
		if c.Digest != chunks[i].Digest || c.Size != chunks[i].Size {
			t.Fatalf("chunk %d: delivered %s/%d, want %s/%d", i, c.Digest, c.Size, chunks[i].Digest, chunks[i].Size)
		}
		if err := rafs.DecodeChunk(c, stored, plain[:c.Size]); err != nil {
			t.Fatalf("chunk %d delivered unverifiable: %v", i, err)
		}
		if !digestHolds(c, stored, plain[:c.Size]) {
			t.Fatalf("chunk %d: digest differs", i)
		}
		n++
		return nil
	})
	return n, err
}

func TestChunkClientRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	img := buildImage(t, e.reg, "rafs/app")
	cc := chunkapi.NewClient(e.url, nil)
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}

	n, err := readAll(t, cc, up, img, img.chunks)
	if err != nil || n != len(img.chunks) {
		t.Fatalf("all chunks: delivered %d of %d, err %v", n, len(img.chunks), err)
	}
	// Out of order and repeated chunks come back in request order.
	mixed := []rafs.Chunk{img.chunks[3], img.chunks[0], img.chunks[3], img.chunks[len(img.chunks)-1]}
	if n, err := readAll(t, cc, up, img, mixed); err != nil || n != len(mixed) {
		t.Errorf("mixed order: delivered %d of %d, err %v", n, len(mixed), err)
	}
	// More chunks than one batch holds are split into several requests.
	many := make([]rafs.Chunk, chunkapi.MaxBatchChunks+10)
	for i := range many {
		many[i] = img.chunks[i%2]
	}
	if n, err := readAll(t, cc, up, img, many); err != nil || n != len(many) {
		t.Errorf("%d chunks: delivered %d, err %v", len(many), n, err)
	}
	if got := testHistogramCount(t, e, "damselfly_proxy_batch_chunks"); got != 4 {
		t.Errorf("batch histogram count: got %d, want 4 requests", got)
	}

	// An error from deliver stops the read and is returned as it is.
	stop := errors.New("enough")
	err = cc.ReadChunks(testCtx(t), up, img.blob, img.chunks, func(i int, _ rafs.Chunk, _ []byte) error {
		if i == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Errorf("deliver error: got %v, want %v", err, stop)
	}
}

func TestChunkClientAuthForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{auth: &registrytest.Auth{User: "bob", Pass: "pw"}})
	img := buildImage(t, e.reg, "rafs/priv")
	cc := chunkapi.NewClient(e.url, nil)
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/priv", Authorization: e.reg.BasicAuth()}
	if n, err := readAll(t, cc, up, img, img.chunks[:3]); err != nil || n != 3 {
		t.Errorf("with forwarded credentials: delivered %d, err %v", n, err)
	}
	up.Authorization = ""
	n, err := readAll(t, cc, up, img, img.chunks[:3])
	if ce := chunkErr(t, err); n != 0 || ce.Index != 0 || ce.Transient || !contains(err.Error(), "401") {
		t.Errorf("without credentials: delivered %d, err %v; want a permanent 401 at chunk 0", n, err)
	}
}

func TestChunkClientRefusesCorruptChunk(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{source: func(up *registry.Client) proxy.ChunkSource {
		return &corruptingSource{inner: &registrySource{up: up}, at: 2}
	}})
	img := buildImage(t, e.reg, "rafs/app")
	cc := chunkapi.NewClient(e.url, nil)
	n, err := readAll(t, cc, registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img, img.chunks)
	ce := chunkErr(t, err)
	if n != 2 || ce.Index != 2 || ce.Transient || !errors.Is(err, rafs.ErrDigestMismatch) {
		t.Errorf("corrupt chunk 2: delivered %d, error %v; want 2 delivered and a permanent digest mismatch at 2", n, err)
	}
}

func TestBatchFailsMidway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{upCfg: func(c *registry.Config) { c.RetryLimit = 1 }})
	img := buildImage(t, e.reg, "rafs/app")
	cc := chunkapi.NewClient(e.url, nil)
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}

	// Permanent: chunk 3 names a digest its bytes do not have, so the
	// source's verification fails.
	bad := append([]rafs.Chunk(nil), img.chunks[:5]...)
	bad[3].Digest[0] ^= 1
	n, err := readAll(t, cc, up, img, bad)
	if ce := chunkErr(t, err); n != 3 || ce.Index != 3 || ce.Transient {
		t.Errorf("bad digest at 3: delivered %d, error %v; want 3 delivered, a permanent error at 3", n, err)
	}

	// Transient: the registry fails every read of chunk 4's range.
	target := fmt.Sprintf("bytes=%d-", img.chunks[4].CompressedOffset)
	e.reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.Header.Get("Range"), target) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "storage down", http.StatusBadGateway)
			return true
		}
		return false
	})
	n, err = readAll(t, cc, up, img, img.chunks[:6])
	if ce := chunkErr(t, err); n != 4 || ce.Index != 4 || !ce.Transient || !contains(err.Error(), "502") {
		t.Errorf("registry 502 at 4: delivered %d, error %v; want 4 delivered, a transient error at 4", n, err)
	}
}

func TestBatchBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	img := buildImage(t, e.reg, "rafs/app")
	c0 := img.chunks[0]
	chunk := func(mod func(m map[string]any)) map[string]any {
		m := map[string]any{"digest": c0.Digest.String(), "offset": c0.CompressedOffset, "stored": c0.CompressedSize,
			"size": c0.Size, "flags": c0.Flags, "ordinal": c0.Ordinal}
		if mod != nil {
			mod(m)
		}
		return m
	}
	body := func(repo, blob string, chunks ...map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"repo": repo, "blob": blob, "chunks": chunks})
		return b
	}
	many := make([]map[string]any, chunkapi.MaxBatchChunks+1)
	for i := range many {
		many[i] = chunk(nil)
	}
	big := make([]map[string]any, 5)
	for i := range big {
		big[i] = chunk(func(m map[string]any) { m["size"] = rafs.MaxChunkSize; m["flags"] = rafs.ChunkCompressed })
	}
	blob := img.blob.String()
	for _, tc := range []struct {
		name string
		body []byte
		hdr  map[string]string
	}{
		{"not json", []byte("{"), nil},
		{"two objects", append(body("rafs/app", blob, chunk(nil)), body("rafs/app", blob, chunk(nil))...), nil},
		{"unknown field", body("rafs/app", blob, chunk(func(m map[string]any) { m["extra"] = 1 })), nil},
		{"bad repo", body("Rafs/App", blob, chunk(nil)), nil},
		{"bad blob", body("rafs/app", "sha256:00", chunk(nil)), nil},
		{"no chunks", body("rafs/app", blob), nil},
		{"too many chunks", body("rafs/app", blob, many...), nil},
		{"too many bytes", body("rafs/app", blob, big...), nil},
		{"bad chunk digest", body("rafs/app", blob, chunk(func(m map[string]any) { m["digest"] = "md5:1" })), nil},
		{"zero size", body("rafs/app", blob, chunk(func(m map[string]any) { m["size"] = 0 })), nil},
		{"huge chunk", body("rafs/app", blob, chunk(func(m map[string]any) { m["stored"] = rafs.MaxChunkSize + 1 })), nil},
		{"negative offset", body("rafs/app", blob, chunk(func(m map[string]any) { m["offset"] = -1 })), nil},
		{"unknown flags", body("rafs/app", blob, chunk(func(m map[string]any) { m["flags"] = 6 })), nil},
		{"raw size mismatch", body("rafs/app", blob, chunk(func(m map[string]any) { m["flags"] = 0; m["stored"] = 10; m["size"] = 20 })), nil},
		{"oversized body", append(body("rafs/app", blob, chunk(nil)), bytes.Repeat([]byte(" "), chunkapi.MaxBatchRequest)...), nil},
		{"bad registry", body("rafs/app", blob, chunk(nil)), map[string]string{chunkapi.HeaderRegistry: "gopher://x"}},
	} {
		code, msg := e.post(t, tc.body, tc.hdr)
		if code != http.StatusBadRequest {
			t.Errorf("%s: got %d %s, want 400", tc.name, code, msg)
		}
	}
	// The same shape, valid, succeeds.
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, e.url+chunkapi.BatchPath, bytes.NewReader(body("rafs/app", blob, chunk(nil))))
	req.Header.Set(chunkapi.HeaderRegistry, e.reg.URL)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != chunkapi.ContentTypeChunks || len(out) != 9+int(c0.CompressedSize) || out[0] != 0 {
		t.Errorf("valid request: got %d %q, %d bytes; want 200, one ok frame of %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(out), 9+c0.CompressedSize)
	}
}

func TestChunkClientProxyDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	img := buildImage(t, e.reg, "rafs/app")
	// Nothing listens on a closed listener's port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	cc := chunkapi.NewClient("http://"+ln.Addr().String(), nil)
	_, err = readAll(t, cc, registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img, img.chunks[:2])
	if ce := chunkErr(t, err); ce.Index != 0 || !ce.Transient {
		t.Errorf("proxy down: got %v, want a transient error at 0", err)
	}
	// The client refuses what the endpoint would, naming the chunk.
	bad := append([]rafs.Chunk(nil), img.chunks[:3]...)
	bad[1].Size = 0
	_, err = readAll(t, chunkapi.NewClient(e.url, nil), registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img, bad)
	if ce := chunkErr(t, err); ce.Index != 1 || ce.Transient {
		t.Errorf("bad chunk 1: got %v, want a permanent error at 1", err)
	}
}
