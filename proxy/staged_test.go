package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"damselfly/proxy"
	"damselfly/proxy/upstream"
	"damselfly/rafs"
)

// stagedSource is a StagedChunkSource over inner: it delivers each chunk
// at once and keeps it (as a peer caches it) only when keep lets it:
// keep is called with the chunk's index and its error is kept's.
type stagedSource struct {
	inner proxy.ChunkSource
	keep  func(ctx context.Context, i int) error
	kept  atomic.Int32 // chunks kept
}

func (s *stagedSource) ReadChunks(ctx context.Context, up proxy.Upstream, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return s.ReadChunksStaged(ctx, up, blob, chunks, func(i int, c rafs.Chunk, stored []byte, kept func() error) error {
		if err := kept(); err != nil {
			return err
		}
		return deliver(i, c, stored)
	})
}

func (s *stagedSource) ReadChunksStaged(ctx context.Context, up proxy.Upstream, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte, kept func() error) error) error {
	return s.inner.ReadChunks(ctx, up, blob, chunks, func(i int, c rafs.Chunk, stored []byte) error {
		return deliver(i, c, stored, func() error {
			if err := s.keep(ctx, i); err != nil {
				return &proxy.ChunkError{Index: i, Transient: true, Err: err}
			}
			s.kept.Add(1)
			return nil
		})
	})
}

// A client that accepts v2 gets each chunk's ok frame while the source is
// still keeping the chunk, and its stored frame once the source has kept
// it; a client that does not gets v1, each ok frame after the chunk was
// kept.
func TestBatchV2SendsBeforeKept(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var src *stagedSource
	e := newEnv(t, envOptions{source: func(up *upstream.Client) proxy.ChunkSource {
		src = &stagedSource{inner: &registrySource{up: up}, keep: func(ctx context.Context, i int) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
		return src
	}})
	img := buildImage(t, e.reg, "rafs/app")
	c := img.chunks[0]
	body, err := json.Marshal(map[string]any{"repo": "rafs/app", "blob": img.blob.String(), "chunks": []map[string]any{{
		"digest": c.Digest.String(), "offset": c.CompressedOffset, "stored": c.CompressedSize, "size": c.Size, "flags": c.Flags, "ordinal": c.Ordinal,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, e.url+proxy.BatchPath, bytes.NewReader(body))
	req.Header.Set(proxy.HeaderRegistry, e.reg.URL)
	req.Header.Set("Accept", "application/json, "+proxy.ContentTypeChunksV2+";q=0.9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != proxy.ContentTypeChunksV2 {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, ct, proxy.ContentTypeChunksV2)
	}
	br := bufio.NewReader(resp.Body)
	ok := make([]byte, 9+int(c.CompressedSize))
	if _, err := io.ReadFull(br, ok); err != nil || ok[0] != 0 {
		t.Fatalf("ok frame before the chunk was kept: %v, status %d", err, ok[0])
	}
	if n := src.kept.Load(); n != 0 {
		t.Fatalf("%d chunks kept before the test let the source keep one", n)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if want := []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}; err != nil || !bytes.Equal(rest, want) {
		t.Fatalf("after the ok frame: got %v %v, want the stored frame %v", rest, err, want)
	}

	// Without Accept, v1.
	req, _ = http.NewRequestWithContext(testCtx(t), http.MethodPost, e.url+proxy.BatchPath, bytes.NewReader(body))
	req.Header.Set(proxy.HeaderRegistry, e.reg.URL)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != proxy.ContentTypeChunks || len(out) != len(ok) || out[0] != 0 {
		t.Errorf("v1: got %q and %d bytes, want %q and one ok frame of %d bytes", ct, len(out), proxy.ContentTypeChunks, len(ok))
	}
}

// The ChunkClient delivers a chunk only after its stored frame, and a
// source that fails to keep a chunk fails that chunk.
func TestChunkClientWaitsForKept(t *testing.T) {
	t.Parallel()
	stop := errors.New("cache went away")
	var src *stagedSource
	e := newEnv(t, envOptions{source: func(up *upstream.Client) proxy.ChunkSource {
		src = &stagedSource{inner: &registrySource{up: up}, keep: func(_ context.Context, i int) error {
			if i == 3 {
				return stop
			}
			return nil
		}}
		return src
	}})
	img := buildImage(t, e.reg, "rafs/app")
	cc := proxy.NewChunkClient(e.url, nil)
	n := 0
	err := cc.ReadChunksDecoded(testCtx(t), proxy.Upstream{Registry: e.reg.URL, Repo: "rafs/app"}, img.blob, img.chunks,
		func(i int, _ rafs.Chunk, _, _ []byte) error {
			// The source may be keeping later chunks already.
			if k := int(src.kept.Load()); k < i+1 {
				t.Errorf("chunk %d delivered with %d chunks kept, want at least %d", i, k, i+1)
			}
			n++
			return nil
		})
	if ce := chunkErr(t, err); n != 3 || ce.Index != 3 || !ce.Transient {
		t.Errorf("got %d delivered and %v, want 3 and a transient error at 3", n, err)
	}
}
