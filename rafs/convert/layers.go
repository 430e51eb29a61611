package convert

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"damselfly/rafs"
	"damselfly/rafs/transport"
)

// sourceLayers turns the source image's layers into build inputs and
// returns the sum of their compressed sizes.
func sourceLayers(img v1.Image) ([]rafs.LayerSource, int64, error) {
	ls, err := img.Layers()
	if err != nil {
		return nil, 0, fmt.Errorf("layers: %w", err)
	}
	var total int64
	var out []rafs.LayerSource
	for i, l := range ls {
		d, err := l.Digest()
		if err != nil {
			return nil, 0, fmt.Errorf("layer %d: %w", i, err)
		}
		mt, err := l.MediaType()
		if err != nil {
			return nil, 0, fmt.Errorf("layer %d: %w", i, err)
		}
		if !knownLayerType(mt) {
			return nil, 0, fmt.Errorf("layer %d (%s): unsupported media type %q", i, d, mt)
		}
		if sz, err := l.Size(); err == nil {
			total += sz
		}
		out = append(out, rafs.LayerSource{Name: d.String(), Open: func(ctx context.Context) (io.ReadCloser, error) {
			return openLayer(ctx, l, d)
		}})
	}
	return out, total, nil
}

func knownLayerType(mt types.MediaType) bool {
	switch mt {
	case types.OCILayer, types.DockerLayer, types.OCIUncompressedLayer, types.DockerUncompressedLayer,
		types.OCILayerZStd, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer, types.DockerForeignLayer:
		return true
	}
	return false
}

// openLayer returns the layer's tar stream. The compressed bytes are
// hashed as they are read; Close (after the stream was read to its end)
// reports a digest mismatch. Decompression runs in its own goroutine a few
// megabytes ahead of the tar parser, so the two overlap.
func openLayer(ctx context.Context, l v1.Layer, want v1.Hash) (io.ReadCloser, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	v := &digestReader{r: rc, h: sha256.New()}
	var magic [4]byte
	n, _ := io.ReadFull(v, magic[:])
	// The decompressors read through a buffer of their own, which is 4
	// KiB for gzip: a read system call per 4 KiB of a multi-gigabyte
	// layer. Given a large buffered reader, they use it instead.
	head := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(magic[:n]), v), layerReadBuffer)
	var dec io.Reader
	var closeDec func()
	switch {
	case n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		g, err := gzip.NewReader(head)
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("gzip: %w", err)
		}
		dec, closeDec = g, func() { g.Close() }
	case n == 4 && bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		z, err := zstd.NewReader(head, zstd.WithDecoderConcurrency(1))
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("zstd: %w", err)
		}
		dec, closeDec = z, z.Close
	default:
		dec, closeDec = head, func() {}
	}
	ra := newReadahead(ctx, dec, 1<<20, 8)
	return &layerStream{ra: ra, v: v, src: rc, want: want, closeDec: closeDec}, nil
}

// layerReadBuffer is how much of a compressed layer one read asks for.
const layerReadBuffer = 1 << 20

type digestReader struct {
	r io.Reader
	h hash.Hash
}

func (d *digestReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.h.Write(p[:n])
	return n, err
}

type layerStream struct {
	ra       *readahead
	v        *digestReader
	src      io.Closer
	want     v1.Hash
	closeDec func()
	closed   bool
	eof      bool
}

func (s *layerStream) Read(p []byte) (int, error) {
	n, err := s.ra.Read(p)
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

// Close stops the readahead and, if the stream was read to its end,
// checks the digest of every compressed byte read.
func (s *layerStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.eof {
		// Abandoned: unblock the reader goroutine by closing its source.
		cerr := s.src.Close()
		s.ra.Close()
		s.closeDec()
		return cerr
	}
	s.ra.Close()
	s.closeDec()
	var err error
	{
		// Trailing bytes after the compressed stream still count.
		if _, cerr := io.Copy(io.Discard, s.v); cerr != nil {
			err = fmt.Errorf("read layer: %w", cerr)
		} else if got := fmt.Sprintf("sha256:%x", s.v.h.Sum(nil)); got != s.want.String() {
			err = fmt.Errorf("layer digest mismatch: got %s, want %s", got, s.want)
		}
	}
	return errorsJoin(err, s.src.Close())
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// fileLayer is a RAFS blob (or the compressed bootstrap) kept in a file.
// Its DiffID is its digest: it is not a tar and has no uncompressed form.
type fileLayer struct {
	path   string
	digest v1.Hash
	size   int64
	mt     types.MediaType
}

var (
	_ v1.Layer            = (*fileLayer)(nil)
	_ transport.LocalFile = (*fileLayer)(nil)
)

func (f *fileLayer) Digest() (v1.Hash, error)             { return f.digest, nil }
func (f *fileLayer) DiffID() (v1.Hash, error)             { return f.digest, nil }
func (f *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(f.path) }
func (f *fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(f.path) }
func (f *fileLayer) Size() (int64, error)                 { return f.size, nil }
func (f *fileLayer) MediaType() (types.MediaType, error)  { return f.mt, nil }

// LocalFile lets an oci: destination link the finished file instead of
// copying it (transport.LocalFile).
func (f *fileLayer) LocalFile() string { return f.path }

type bootstrapLayer struct {
	fileLayer
	rawDigest string
}

// newBootstrapLayer compresses the bootstrap with zstd into work.
func newBootstrapLayer(work string, boot []byte) (*bootstrapLayer, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	comp := enc.EncodeAll(boot, nil)
	enc.Close()
	sum := sha256.Sum256(comp)
	h, err := v1.NewHash(fmt.Sprintf("sha256:%x", sum[:]))
	if err != nil {
		return nil, err
	}
	p := filepath.Join(work, "bootstrap-"+h.Hex)
	if err := os.WriteFile(p, comp, 0o644); err != nil {
		return nil, err
	}
	return &bootstrapLayer{
		fileLayer: fileLayer{path: p, digest: h, size: int64(len(comp)), mt: rafs.MediaTypeBootstrap},
		rawDigest: fmt.Sprintf("sha256:%x", sha256.Sum256(boot)),
	}, nil
}
