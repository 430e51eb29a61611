package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// ReadChunksDecoded hands over, with each chunk's stored bytes, its
// decoded content, which hashes to the chunk's digest; ReadChunks
// delivers the same stored bytes.
func TestChunkClientDecoded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	img := buildImage(t, e.reg, "rafs/app")
	cc := chunkapi.NewClient(e.url, nil)
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}

	var stored [][]byte
	next := 0
	err := cc.ReadChunksDecoded(testCtx(t), up, img.blob, img.chunks, func(i int, c rafs.Chunk, s, plain []byte) error {
		if i != next {
			t.Fatalf("delivered chunk %d, want %d", i, next)
		}
		next++
		if len(plain) != int(c.Size) {
			t.Fatalf("chunk %d: %d decoded bytes, want %d", i, len(plain), c.Size)
		}
		if !digestHolds(img.chunks[i], s, plain) {
			t.Fatalf("chunk %d: decoded bytes do not hash to its digest", i)
		}
		want := make([]byte, c.Size)
		if err := rafs.DecodeChunk(c, s, want); err != nil || !bytes.Equal(want, plain) {
			t.Fatalf("chunk %d: decoded bytes differ from its stored bytes decoded (%v)", i, err)
		}
		stored = append(stored, bytes.Clone(s))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != len(img.chunks) {
		t.Fatalf("delivered %d chunks, want %d", next, len(img.chunks))
	}
	i := 0
	err = cc.ReadChunks(testCtx(t), up, img.blob, img.chunks, func(_ int, _ rafs.Chunk, s []byte) error {
		if !bytes.Equal(s, stored[i]) {
			t.Errorf("chunk %d: ReadChunks delivered other stored bytes than ReadChunksDecoded", i)
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A corrupt chunk is never handed over decoded: the read stops before it
// with a permanent digest mismatch naming it.
func TestChunkClientDecodedRefusesCorrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{source: func(up *registry.Client) proxy.ChunkSource {
		return &corruptingSource{inner: &registrySource{up: up}, at: 3}
	}})
	img := buildImage(t, e.reg, "rafs/app")
	cc := chunkapi.NewClient(e.url, nil)
	n := 0
	err := cc.ReadChunksDecoded(testCtx(t), registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img.blob, img.chunks,
		func(i int, c rafs.Chunk, _, plain []byte) error {
			if c.Algo().Sum(plain) != c.Digest {
				t.Errorf("chunk %d handed over with the wrong content", i)
			}
			n++
			return nil
		})
	ce := chunkErr(t, err)
	if n != 3 || ce.Index != 3 || ce.Transient || !errors.Is(err, rafs.ErrDigestMismatch) {
		t.Errorf("delivered %d, error %v; want 3 delivered and a permanent digest mismatch at 3", n, err)
	}
}

// An error from deliver stops the read and comes back as it is.
func TestChunkClientDecodedDeliverError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	img := buildImage(t, e.reg, "rafs/app")
	cc := chunkapi.NewClient(e.url, nil)
	stop := errors.New("enough")
	n := 0
	err := cc.ReadChunksDecoded(testCtx(t), registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img.blob, img.chunks,
		func(int, rafs.Chunk, []byte, []byte) error {
			n++
			if n == 2 {
				return stop
			}
			return nil
		})
	if err != stop || n != 2 {
		t.Errorf("got %v after %d chunks, want deliver's own error after 2", err, n)
	}
}

// Batches one after the other go over one connection: the client reads
// each response to its end, so the connection returns to the pool. The
// source ends each response only after the client has taken its last
// chunk, as a peer does whose last chunk is large.
func TestChunkClientReusesConnection(t *testing.T) {
	t.Parallel()
	taken := make(chan struct{}, 1)
	e := newEnv(t, envOptions{source: func(up *registry.Client) proxy.ChunkSource {
		return &lingeringSource{inner: &registrySource{up: up}, release: taken}
	}})
	img := buildImage(t, e.reg, "rafs/app")
	var dials atomic.Int32
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	cc := chunkapi.NewClient(e.url, &http.Client{Transport: tr})
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}
	for i, c := range img.chunks[:4] {
		err := cc.ReadChunks(testCtx(t), up, img.blob, []rafs.Chunk{c}, func(int, rafs.Chunk, []byte) error {
			taken <- struct{}{}
			return nil
		})
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("4 batches in a row dialled %d connections, want 1", n)
	}
}

// lingeringSource returns from each read only once release yields (or
// the request ends), after the inner source delivered everything.
type lingeringSource struct {
	inner   proxy.ChunkSource
	release chan struct{}
}

func (s *lingeringSource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	if err := s.inner.ReadChunks(ctx, up, blob, chunks, deliver); err != nil {
		return err
	}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
