package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/rafs/registry"
)

// BlobReader reads blobs (layers, configs, manifests) of the repository or
// layout a [Ref] names, whole or by byte range. Against a registry it goes
// through the project's registry client (rafs/registry): it authenticates
// once, in [NewBlobReader], and then reuses the token and the
// connections, so lazy chunk fetches should keep one per repository rather
// than call [BlobRange] each time. Transient registry failures (network
// errors, 5xx, 429) are retried there, with the project's backoff, up to
// rafs/registry's default retry limit: a ranged read resumes where the
// failed attempt stopped, a whole blob is retried only until its body
// starts. Callers should not retry these reads again. It is safe for
// concurrent use.
type BlobReader struct {
	ref Ref
	reg *registryBlobs // docker only
}

// NewBlobReader returns a BlobReader for r. For docker it pings the registry
// and obtains a pull token; ctx bounds only that handshake.
func NewBlobReader(ctx context.Context, r Ref, opts Options) (*BlobReader, error) {
	b := &BlobReader{ref: r}
	switch r.Transport {
	case OCI, DockerArchive:
	case Docker:
		ref, err := registryName(r, opts)
		if err != nil {
			return nil, opError("open blob reader for", r, err)
		}
		if b.reg, err = newRegistryBlobs(ctx, ref, opts); err != nil {
			return nil, opError("open blob reader for", r, err)
		}
	default:
		return nil, opError("open blob reader for", r, unknownTransport(r))
	}
	return b, nil
}

// Blob returns the whole blob with digest d and its size. The caller must
// close the reader. From a registry the content is checked against d as it
// is read (the final Read fails with [ErrDigestMismatch] if it differs) and
// the size is -1 if the registry sent no Content-Length. A missing blob
// gives an error wrapping [ErrNotFound].
func (b *BlobReader) Blob(ctx context.Context, d v1.Hash) (io.ReadCloser, int64, error) {
	rc, n, err := b.blob(ctx, d)
	if err != nil {
		return nil, 0, fmt.Errorf("read blob %s from %s: %w", d, b.ref, err)
	}
	return rc, n, nil
}

func (b *BlobReader) blob(ctx context.Context, d v1.Hash) (io.ReadCloser, int64, error) {
	if err := checkDigest(d); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	switch b.ref.Transport {
	case OCI:
		f, size, err := ociBlobFile(b.ref.Path, d)
		if err != nil {
			return nil, 0, err
		}
		return f, size, nil
	case DockerArchive:
		return archiveBlob(b.ref, d)
	default:
		return b.reg.blob(ctx, d)
	}
}

// BlobRange returns exactly bytes [off, off+length) of the blob with digest
// d; the caller must close the reader. A range past the end of the blob is
// an error, reported by BlobRange or, when the source only shows it
// mid-stream, by Read as [io.ErrUnexpectedEOF]. From a registry the bytes
// are read before BlobRange returns, by [BlobReader.ReadRange]; an oci:
// layout streams them. The bytes are not verified, since a part of a
// blob cannot be checked against its digest. docker-archive does not
// support ranged reads ([errors.ErrUnsupported]).
func (b *BlobReader) BlobRange(ctx context.Context, d v1.Hash, off, length int64) (io.ReadCloser, error) {
	rc, err := b.blobRange(ctx, d, off, length)
	if err != nil {
		return nil, fmt.Errorf("read bytes %d+%d of blob %s from %s: %w", off, length, d, b.ref, err)
	}
	return rc, nil
}

func (b *BlobReader) blobRange(ctx context.Context, d v1.Hash, off, length int64) (io.ReadCloser, error) {
	if err := checkRange(ctx, d, off, length); err != nil {
		return nil, err
	}
	switch b.ref.Transport {
	case OCI:
		f, size, err := ociBlobFile(b.ref.Path, d)
		if err != nil {
			return nil, err
		}
		if off+length > size {
			f.Close()
			return nil, fmt.Errorf("range extends past the end of the blob (size %d)", size)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.NewSectionReader(f, off, length), f}, nil
	case DockerArchive:
		return nil, fmt.Errorf("docker-archive: ranged reads: %w", errors.ErrUnsupported)
	default:
		if length == 0 {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		if length > registry.MaxRange {
			return nil, fmt.Errorf("a ranged read from a registry is at most %d bytes: read the blob whole", registry.MaxRange)
		}
		p := make([]byte, length)
		if err := b.reg.readRange(ctx, d, off, p); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(p)), nil
	}
}

// ReadRange fills p with bytes [off, off+len(p)) of the blob with digest
// d, as [BlobReader.BlobRange] would yield them, without a stream between:
// what lazy chunk reads use. From a registry this is one GET with a Range
// header (more only to resume after a transient failure), of at most
// rafs/registry.MaxRange bytes. p's contents are unspecified on error.
func (b *BlobReader) ReadRange(ctx context.Context, d v1.Hash, off int64, p []byte) error {
	if err := b.readRange(ctx, d, off, p); err != nil {
		return fmt.Errorf("read bytes %d+%d of blob %s from %s: %w", off, len(p), d, b.ref, err)
	}
	return nil
}

func (b *BlobReader) readRange(ctx context.Context, d v1.Hash, off int64, p []byte) error {
	if b.ref.Transport != Docker {
		rc, err := b.blobRange(ctx, d, off, int64(len(p)))
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.ReadFull(rc, p)
		return err
	}
	if err := checkRange(ctx, d, off, int64(len(p))); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	return b.reg.readRange(ctx, d, off, p)
}

// checkRange checks a ranged read's arguments, and ctx, before any I/O.
func checkRange(ctx context.Context, d v1.Hash, off, length int64) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	if off < 0 || length < 0 || off > (1<<63-1)-length {
		return fmt.Errorf("invalid range")
	}
	return ctx.Err()
}

// Blob returns the whole blob with digest d from r and its size; see
// [BlobReader.Blob]. Against a registry each call authenticates anew.
func Blob(ctx context.Context, r Ref, d v1.Hash, opts Options) (io.ReadCloser, int64, error) {
	b, err := NewBlobReader(ctx, r, opts)
	if err != nil {
		return nil, 0, err
	}
	return b.Blob(ctx, d)
}

// BlobRange returns bytes [off, off+length) of the blob with digest d from
// r; see [BlobReader.BlobRange]. Against a registry each call authenticates
// anew; keep a [BlobReader] for repeated reads.
func BlobRange(ctx context.Context, r Ref, d v1.Hash, off, length int64, opts Options) (io.ReadCloser, error) {
	b, err := NewBlobReader(ctx, r, opts)
	if err != nil {
		return nil, err
	}
	return b.BlobRange(ctx, d, off, length)
}

// ociBlobFile opens blobs/ALG/HEX in the layout at dir. d must have passed
// checkDigest, which keeps the path inside the layout.
func ociBlobFile(dir string, d v1.Hash) (*os.File, int64, error) {
	f, err := os.Open(filepath.Join(dir, "blobs", d.Algorithm, d.Hex))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}
