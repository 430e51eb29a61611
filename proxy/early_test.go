package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// earlySource is an EarlyChunkSource over inner: after delivering each
// chunk it keeps it (as a peer caches it) only once keep returns; its
// ReadChunks delivers each chunk after keeping it.
type earlySource struct {
	inner proxy.ChunkSource
	keep  func(ctx context.Context) error
	kept  atomic.Int32 // chunks kept
	early atomic.Int32 // calls of ReadChunksEarly
}

func (s *earlySource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return s.inner.ReadChunks(ctx, up, blob, chunks, func(i int, c rafs.Chunk, stored []byte) error {
		if err := s.keepOne(ctx); err != nil {
			return err
		}
		return deliver(i, c, stored)
	})
}

func (s *earlySource) ReadChunksEarly(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	s.early.Add(1)
	return s.inner.ReadChunks(ctx, up, blob, chunks, func(i int, c rafs.Chunk, stored []byte) error {
		if err := deliver(i, c, stored); err != nil {
			return err
		}
		return s.keepOne(ctx)
	})
}

func (s *earlySource) keepOne(ctx context.Context) error {
	if err := s.keep(ctx); err != nil {
		return err
	}
	s.kept.Add(1)
	return nil
}

// A client that accepts v2 gets a chunk from an EarlyChunkSource while
// the source is still keeping it; one that does not gets v1, each chunk
// once kept.
func TestBatchV2SendsBeforeKept(t *testing.T) {
	t.Parallel()
	release := make(chan struct{}, 1)
	var src *earlySource
	e := newEnv(t, envOptions{source: func(up *registry.Client) proxy.ChunkSource {
		src = &earlySource{inner: &registrySource{up: up}, keep: func(ctx context.Context) error {
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
	post := func(accept string) *http.Response {
		req, _ := http.NewRequestWithContext(testCtx(t), http.MethodPost, e.url+chunkapi.BatchPath, bytes.NewReader(body))
		req.Header.Set(chunkapi.HeaderRegistry, e.reg.URL)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("application/json, " + chunkapi.ContentTypeChunksV2 + ";q=0.9")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != chunkapi.ContentTypeChunksV2 {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, ct, chunkapi.ContentTypeChunksV2)
	}
	br := bufio.NewReader(resp.Body)
	frame := make([]byte, 9+int(c.CompressedSize))
	if _, err := io.ReadFull(br, frame); err != nil || frame[0] != 0 {
		t.Fatalf("ok frame before the chunk was kept: %v, status %d", err, frame[0])
	}
	if n := src.kept.Load(); n != 0 {
		t.Fatalf("%d chunks kept before the test let the source keep one", n)
	}
	release <- struct{}{}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the only ok frame: %d bytes, %v; want the end", len(rest), err)
	}
	resp.Body.Close()

	// Without Accept, v1: the frame comes once the chunk is kept.
	release <- struct{}{}
	resp = post("")
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != chunkapi.ContentTypeChunks || !bytes.Equal(out, frame) || src.kept.Load() != 2 {
		t.Errorf("v1: got %q, %d bytes and %d chunks kept, want %q, the same ok frame, 2", ct, len(out), src.kept.Load(), chunkapi.ContentTypeChunks)
	}
}

// The chunkapi.Client asks for v2 and reads it: every chunk delivered,
// verified.
func TestChunkClientReadsV2(t *testing.T) {
	t.Parallel()
	var src *earlySource
	e := newEnv(t, envOptions{source: func(up *registry.Client) proxy.ChunkSource {
		src = &earlySource{inner: &registrySource{up: up}, keep: func(context.Context) error { return nil }}
		return src
	}})
	img := buildImage(t, e.reg, "rafs/app")
	n, err := readAll(t, chunkapi.NewClient(e.url, nil), registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img, img.chunks)
	if err != nil || n != len(img.chunks) {
		t.Errorf("got %d chunks and %v, want all %d", n, err, len(img.chunks))
	}
	if src.early.Load() == 0 {
		t.Error("the server never used ReadChunksEarly: the client did not get v2")
	}
}
