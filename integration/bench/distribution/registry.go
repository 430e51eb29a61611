package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/rafs"
)

// registry is go-containerregistry's in-process registry on a free port
// of 127.0.0.1, holding the image's blobs in memory: the origin.
type registry struct {
	addr string
	srv  *http.Server
	done chan error
}

// startRegistry serves the blobs of img, read from blobDir.
func startRegistry(ctx context.Context, img *image, blobDir string) (*registry, error) {
	mem := gcrregistry.NewInMemoryBlobHandler()
	put, ok := mem.(gcrregistry.BlobPutHandler)
	if !ok {
		return nil, errors.New("in-memory blob handler cannot put")
	}
	for _, b := range img.blobs {
		data, err := os.ReadFile(rafs.BlobPath(blobDir, b.blob.Digest))
		if err != nil {
			return nil, err
		}
		h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", b.blob.Digest[:])}
		if err := put.Put(ctx, img.repo, h, io.NopCloser(bytes.NewReader(data))); err != nil {
			return nil, fmt.Errorf("put blob %s: %w", h, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &registry{
		addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0)), gcrregistry.WithBlobHandler(mem)),
			ReadHeaderTimeout: 10 * time.Second,
		},
		done: make(chan error, 1),
	}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
}

// stop closes the listener and every connection and waits for Serve.
func (r *registry) stop() error {
	err := r.srv.Close()
	if serr := <-r.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
