// Package image opens RAFS images for reading: it resolves a reference to
// a RAFS manifest, fetches the bootstrap, checks it against the manifest's
// digest, and reads chunk bytes from the image's blobs by range. Every
// reader of converted images (inspect, check, unpack, mount, preheat,
// convert --chunk-dict) goes through it, so the chain of trust from
// manifest digest to chunk digest is built in one place, and so is the
// bound on what a bootstrap layer may inflate to (Options.MaxBootstrapSize;
// rafs/FORMAT.md, "Reading a bootstrap layer").
package image

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/rafs"
	"damselfly/rafs/transport"
)

// ErrNotRAFS is returned when a reference names a plain OCI image.
var ErrNotRAFS = errors.New("not a RAFS image")

// Image is an opened RAFS image. It is safe for concurrent use.
type Image struct {
	// Ref is what was opened; Digest its manifest digest (zero for a local
	// bootstrap).
	Ref      string
	Digest   v1.Hash
	Manifest *v1.Manifest

	img   v1.Image // nil for a local bootstrap
	boot  *rafs.Bootstrap
	blobs rafs.BlobReader
	close func() error
}

// Options configure Open.
type Options struct {
	Transport transport.Options
	// BlobDir holds the blobs of a local bootstrap (files named by digest
	// hex). Default: the bootstrap's directory.
	BlobDir string
	// MaxBootstrapSize is the largest bootstrap a bootstrap layer may
	// inflate to, in bytes; 0 means rafs.DefaultMaxBootstrapSize. A local
	// bootstrap file is mapped, not inflated, and is bounded by
	// rafs.MaxBootstrapSize alone.
	MaxBootstrapSize int64
}

// Open opens ref: a transport reference (oci:, docker://, docker-archive:)
// to a RAFS manifest, or to an image index holding one (the manifest whose
// platform has rafs.PlatformFeature), or the path of a local bootstrap
// file.
func Open(ctx context.Context, ref string, opts Options) (*Image, error) {
	if !strings.Contains(ref, ":") || isFile(ref) {
		return openLocal(ref, opts)
	}
	r, err := transport.Parse(ref, opts.Transport)
	if err != nil {
		return nil, err
	}
	img, err := readImage(ctx, r, opts.Transport)
	if err != nil {
		return nil, err
	}
	br, err := transport.NewBlobReader(ctx, r, opts.Transport)
	if err != nil {
		return nil, err
	}
	return FromImage(ctx, ref, img, br, opts.MaxBootstrapSize)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func openLocal(path string, opts Options) (*Image, error) {
	b, err := rafs.Open(path, rafs.OpenOptions{})
	if err != nil {
		return nil, err
	}
	dir := opts.BlobDir
	if dir == "" {
		dir = filepath.Dir(path)
	}
	blobs := rafs.NewDirBlobs(dir)
	return &Image{Ref: path, boot: b, blobs: blobs, close: func() error {
		return errors.Join(blobs.Close(), b.Close())
	}}, nil
}

// FromImage opens a RAFS image given as a go-containerregistry image and
// a reader for its blobs, inflating its bootstrap to at most
// maxBootstrap bytes (0: rafs.DefaultMaxBootstrapSize).
func FromImage(ctx context.Context, ref string, img v1.Image, br *transport.BlobReader, maxBootstrap int64) (*Image, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("%s: manifest digest: %w", ref, err)
	}
	bl, err := BootstrapLayer(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	rc, _, err := br.Blob(ctx, bl.Digest)
	if err != nil {
		return nil, err
	}
	data, err := ReadBootstrapLimit(rc, bl, maxBootstrap)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: bootstrap %s: %w", ref, bl.Digest, err)
	}
	// The digest check above anchors the bytes; Decode still checks the
	// structure (and its own checksum, which is cheap).
	b, err := rafs.Decode(data, rafs.OpenOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if err := checkBlobsMatch(b, m); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return &Image{Ref: ref, Digest: d, Manifest: m, img: img, boot: b, blobs: &registryBlobs{br: br}, close: b.Close}, nil
}

// BootstrapLayer finds the bootstrap layer of a RAFS manifest.
func BootstrapLayer(m *v1.Manifest) (v1.Descriptor, error) {
	if m.Annotations[rafs.AnnotationVersion] == "" || len(m.Layers) == 0 {
		return v1.Descriptor{}, ErrNotRAFS
	}
	bl := m.Layers[len(m.Layers)-1]
	if !rafs.IsBootstrapMediaType(string(bl.MediaType)) {
		return v1.Descriptor{}, fmt.Errorf("%w: last layer has media type %s", ErrNotRAFS, bl.MediaType)
	}
	return bl, nil
}

// ReadBootstrap reads a bootstrap layer with the default size limit; see
// ReadBootstrapLimit.
func ReadBootstrap(rc io.Reader, desc v1.Descriptor) ([]byte, error) {
	return ReadBootstrapLimit(rc, desc, 0)
}

// ReadBootstrapLimit reads a bootstrap layer whose stream rc must yield
// the layer's bytes and returns the decompressed bootstrap, at most max
// bytes (0: rafs.DefaultMaxBootstrapSize). It inflates as
// rafs.ReadBootstrapLayer does: the superblock first, then no more than
// the size it declares, within the limit, so a small layer that inflates
// to gigabytes is refused after its first bytes. The manifest's sizes are
// checked, never used to size a buffer: the layer must be desc.Size bytes
// with digest desc.Digest, and the bootstrap must have the size and
// digest its annotations record, when they do.
func ReadBootstrapLimit(rc io.Reader, desc v1.Descriptor, max int64) ([]byte, error) {
	opts := rafs.ReadOptions{MaxSize: max}
	if desc.Size <= 0 || desc.Size > opts.MaxLayerSize() {
		return nil, fmt.Errorf("layer size %d out of range: a bootstrap of at most %d bytes compresses to at most %d", desc.Size, opts.Limit(), opts.MaxLayerSize())
	}
	if a, ok := desc.Annotations[rafs.AnnotationBootstrapSize]; ok {
		s, err := strconv.ParseInt(a, 10, 64)
		if err != nil || s <= 0 {
			return nil, fmt.Errorf("annotation %s: %q is not a size", rafs.AnnotationBootstrapSize, a)
		}
		opts.ExpectSize = s
	}
	h := sha256.New()
	layer := &countingReader{r: io.TeeReader(io.LimitReader(rc, desc.Size+1), h)}
	data, err := rafs.ReadBootstrapLayer(layer, opts)
	if err != nil {
		return nil, err
	}
	// The decoder stops at the end of the zstd stream; whatever follows
	// is part of the layer and of its digest. LimitReader bounds it.
	if _, err := io.Copy(io.Discard, layer); err != nil {
		return nil, fmt.Errorf("read layer: %w", err)
	}
	if layer.n != desc.Size {
		return nil, fmt.Errorf("got %d bytes, manifest says %d", layer.n, desc.Size)
	}
	if got := fmt.Sprintf("sha256:%x", h.Sum(nil)); got != desc.Digest.String() {
		return nil, fmt.Errorf("digest %s, manifest says %s", got, desc.Digest)
	}
	if want := desc.Annotations[rafs.AnnotationBootstrapDigest]; want != "" {
		if got := fmt.Sprintf("sha256:%x", sha256.Sum256(data)); got != want {
			return nil, fmt.Errorf("uncompressed digest %s, annotation says %s", got, want)
		}
	}
	return data, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// checkBlobsMatch requires layer i of the manifest to be blob i of the
// bootstrap, so chunk reads by blob index reach the right registry blob.
func checkBlobsMatch(b *rafs.Bootstrap, m *v1.Manifest) error {
	blobs, err := b.Blobs()
	if err != nil {
		return err
	}
	if len(blobs) != len(m.Layers)-1 {
		return fmt.Errorf("bootstrap has %d blobs, manifest %d blob layers", len(blobs), len(m.Layers)-1)
	}
	for i, bl := range blobs {
		l := m.Layers[i]
		if !rafs.IsBlobMediaType(string(l.MediaType)) {
			return fmt.Errorf("manifest layer %d (%s) has media type %q, not a RAFS blob", i, l.Digest, l.MediaType)
		}
		if l.Digest.String() != bl.Digest.String() || uint64(l.Size) != bl.CompressedSize {
			return fmt.Errorf("blob %d is %s (%d bytes), manifest layer %d is %s (%d bytes)", i, bl.Digest, bl.CompressedSize, i, l.Digest, l.Size)
		}
	}
	return nil
}

// Layer returns the manifest layer with digest h, for copying blobs into
// another image.
func (i *Image) Layer(h v1.Hash) (v1.Layer, error) {
	if i.img == nil {
		return nil, fmt.Errorf("%s: a local bootstrap has no manifest layers", i.Ref)
	}
	return i.img.LayerByDigest(h)
}

// Bootstrap returns the image's bootstrap.
func (i *Image) Bootstrap() *rafs.Bootstrap { return i.boot }

// Blobs returns a reader of the image's stored blob bytes.
func (i *Image) Blobs() rafs.BlobReader { return i.blobs }

// ChunkSource returns a source that reads each chunk by one range request
// and verifies it.
func (i *Image) ChunkSource() rafs.ChunkSource {
	return &rafs.BlobChunkSource{Bootstrap: i.boot, Blobs: i.blobs}
}

// FS returns the io/fs view of the image.
func (i *Image) FS(ctx context.Context) *rafs.FS { return rafs.NewFS(ctx, i.boot, i.ChunkSource()) }

// Close releases the image.
func (i *Image) Close() error {
	if i.close == nil {
		return nil
	}
	c := i.close
	i.close = nil
	return c()
}

// registryBlobs reads blob ranges through a transport.BlobReader, which
// retries transient registry failures itself.
type registryBlobs struct{ br *transport.BlobReader }

var _ rafs.BlobReader = (*registryBlobs)(nil)

func (r *registryBlobs) ReadBlob(ctx context.Context, blob rafs.Blob, off int64, p []byte) error {
	d, err := v1.NewHash(blob.Digest.String())
	if err != nil {
		return err
	}
	return r.br.ReadRange(ctx, d, off, p)
}
