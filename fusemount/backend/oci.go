package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"damselfly/rafs"
)

// maxOpenBlobs bounds the blob files an ociBlobs keeps open; an image has
// one blob per layer, so this is rarely reached.
const maxOpenBlobs = 64

// ociBlobs reads blobs of an OCI image layout directory, keeping files
// open between reads. A file is closed only when no read holds it. It is
// safe for concurrent use.
type ociBlobs struct {
	dir string

	mu     sync.Mutex
	files  map[rafs.Digest]*blobFile
	closed bool
}

type blobFile struct {
	f       *os.File
	refs    int
	dropped bool // out of the map: close at refs == 0
}

func newOCIBlobs(dir string) (*ociBlobs, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("OCI layout %s: not a directory", dir)
	}
	return &ociBlobs{dir: dir, files: map[rafs.Digest]*blobFile{}}, nil
}

// read fills p with bytes [off, off+len(p)) of blob d.
func (o *ociBlobs) read(ctx context.Context, d rafs.Digest, off int64, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	bf, err := o.acquire(d)
	if err != nil {
		return err
	}
	defer o.release(bf)
	n, err := bf.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the file ends within the range (%d of %d bytes)", ErrRange, n, len(p))
	}
	return err
}

func (o *ociBlobs) acquire(d rafs.Digest) (*blobFile, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, ErrClosed
	}
	if bf, ok := o.files[d]; ok {
		bf.refs++
		return bf, nil
	}
	// d is 32 bytes printed as hex: the path stays inside the layout.
	f, err := os.Open(filepath.Join(o.dir, "blobs", "sha256", fmt.Sprintf("%x", d[:])))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return nil, err
	}
	if len(o.files) >= maxOpenBlobs {
		o.evictIdle()
	}
	bf := &blobFile{f: f, refs: 1}
	o.files[d] = bf
	return bf, nil
}

// evictIdle drops one file no read holds, if there is one; o.mu is held.
func (o *ociBlobs) evictIdle() {
	for d, bf := range o.files {
		if bf.refs == 0 {
			delete(o.files, d)
			bf.f.Close()
			return
		}
	}
}

func (o *ociBlobs) release(bf *blobFile) {
	o.mu.Lock()
	defer o.mu.Unlock()
	bf.refs--
	if bf.dropped && bf.refs == 0 {
		bf.f.Close()
	}
}

// close closes idle files now and the others when their reads finish.
func (o *ociBlobs) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	var errs []error
	for d, bf := range o.files {
		delete(o.files, d)
		if bf.refs == 0 {
			errs = append(errs, bf.f.Close())
		} else {
			bf.dropped = true
		}
	}
	return errors.Join(errs...)
}
