package main

import (
	"context"
	"fmt"
	"strings"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// proxyChunkSource reads an image's chunks through a peer's batch
// endpoint: the library view's way to the P2P network without a mount.
type proxyChunkSource struct {
	cc   *chunkapi.Client
	up   registry.Ref
	boot *rafs.Bootstrap
}

var _ rafs.ChunkSource = (*proxyChunkSource)(nil)

// newProxyChunkSource serves the chunks of ref (a docker:// reference to
// a loopback registry) through the proxy at proxyURL.
func newProxyChunkSource(proxyURL, ref string, boot *rafs.Bootstrap) (*proxyChunkSource, error) {
	rest, ok := strings.CutPrefix(ref, "docker://")
	host, repo, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return nil, fmt.Errorf("%s: want docker://HOST/REPO:TAG", ref)
	}
	if i := strings.LastIndexAny(repo, ":@"); i >= 0 {
		repo = repo[:i]
	}
	return &proxyChunkSource{cc: chunkapi.NewClient(proxyURL, nil), up: registry.Ref{Registry: "http://" + host, Repo: repo}, boot: boot}, nil
}

func (s *proxyChunkSource) ReadChunk(ctx context.Context, c rafs.Chunk, dst []byte) error {
	b, err := s.boot.Blob(c.Blob)
	if err != nil {
		return err
	}
	return s.cc.ReadChunks(ctx, s.up, b.Digest, []rafs.Chunk{c}, func(_ int, got rafs.Chunk, stored []byte) error {
		return rafs.DecodeChunk(got, stored, dst)
	})
}

// authorize asks the proxy for grants for every blob of the image.
func (s *proxyChunkSource) authorize(ctx context.Context) error {
	blobs, err := s.boot.Blobs()
	if err != nil {
		return err
	}
	ds := make([]rafs.Digest, len(blobs))
	for i, b := range blobs {
		ds[i] = b.Digest
	}
	return s.cc.Authorize(ctx, s.up, ds)
}
