package rafs

import (
	"context"
	"fmt"
	"os"
	"sync"
)

// DirBlobs reads blobs kept as files named by their digest's hex in one
// directory: a builder's BlobDir, or an OCI layout's blobs/sha256. Open
// files are kept until Close. It is safe for concurrent use.
type DirBlobs struct {
	Dir   string
	mu    sync.Mutex
	files map[Digest]*os.File
}

var _ BlobReader = (*DirBlobs)(nil)

// NewDirBlobs returns a reader over dir.
func NewDirBlobs(dir string) *DirBlobs { return &DirBlobs{Dir: dir} }

func (d *DirBlobs) open(blob Blob) (*os.File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f := d.files[blob.Digest]; f != nil {
		return f, nil
	}
	f, err := os.Open(BlobPath(d.Dir, blob.Digest))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if uint64(st.Size()) != blob.CompressedSize {
		f.Close()
		return nil, fmt.Errorf("blob %s: file has %d bytes, want %d", blob.Digest, st.Size(), blob.CompressedSize)
	}
	if d.files == nil {
		d.files = map[Digest]*os.File{}
	}
	d.files[blob.Digest] = f
	return f, nil
}

// ReadBlob implements BlobReader.
func (d *DirBlobs) ReadBlob(ctx context.Context, blob Blob, off int64, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := d.open(blob)
	if err != nil {
		return err
	}
	if _, err := f.ReadAt(p, off); err != nil {
		return fmt.Errorf("blob %s: read %d bytes at %d: %w", blob.Digest, len(p), off, err)
	}
	return nil
}

// Close closes the open blob files.
func (d *DirBlobs) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, f := range d.files {
		f.Close()
		delete(d.files, k)
	}
	return nil
}
