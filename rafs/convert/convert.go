// Package convert turns OCI images into RAFS images: it reads the source's
// layers (verifying each against its digest while decompressing it ahead
// of the parser), runs rafs.Build, and writes an OCI manifest whose layers
// are the blobs and the bootstrap, optionally with an index that keeps the
// plain image for runtimes without damselfly.
package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
	"damselfly/rafs/image"
	"damselfly/rafs/transport"
)

// Options configure Convert.
type Options struct {
	Build rafs.BuildOptions // BlobDir and Dict are filled in by Convert
	// ChunkDict names a RAFS image (any transport) whose chunks are
	// reused; the blobs holding them are copied into the destination. A
	// local bootstrap is opened too, but its blobs cannot be copied, so
	// the conversion fails once a chunk would come from it.
	ChunkDict string
	// MaxBootstrapSize bounds the chunk dictionary's bootstrap as
	// image.Options.MaxBootstrapSize does; 0 means the default.
	MaxBootstrapSize int64
	// Index also writes an image index holding the source manifest and the
	// RAFS manifest, tagged as the destination.
	Index     bool
	Transport transport.Options
	// WorkDir holds blobs while they are built; default os.TempDir. On
	// the file system of an oci: destination, the finished blobs are
	// linked into the layout rather than copied.
	WorkDir string
	// Total, if set, is called once with the uncompressed size estimate
	// (sum of layer sizes) before building, for progress bars.
	Total  func(compressedBytes int64)
	Logger *slog.Logger
}

// Result summarises a conversion.
type Result struct {
	Source         string          `json:"source"`
	Destination    string          `json:"destination"`
	SourceDigest   string          `json:"source_digest"`
	Digest         string          `json:"digest"`
	IndexDigest    string          `json:"index_digest,omitempty"`
	SourceLayers   int64           `json:"source_layer_bytes"` // compressed
	BootstrapBytes int64           `json:"bootstrap_bytes"`
	BootstrapLayer int64           `json:"bootstrap_layer_bytes"` // compressed
	NewBlobBytes   int64           `json:"new_blob_bytes"`
	DictBlobs      int             `json:"dict_blobs"`
	Stats          rafs.BuildStats `json:"stats"`
	Seconds        float64         `json:"seconds"`
}

// Convert reads src, converts it and writes the RAFS image to dst.
func Convert(ctx context.Context, src, dst string, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	sref, err := transport.Parse(src, opts.Transport)
	if err != nil {
		return nil, err
	}
	dref, err := transport.Parse(dst, opts.Transport)
	if err != nil {
		return nil, err
	}
	if opts.Index && dref.Transport == transport.DockerArchive {
		// Found out only after writing the image, this would leave an
		// archive behind an error.
		return nil, fmt.Errorf("%s: a docker-archive cannot hold the image index that Index asks for: %w", dst, errors.ErrUnsupported)
	}
	simg, err := transport.ReadImage(ctx, sref, opts.Transport)
	if err != nil {
		return nil, err
	}
	if _, err := simg.Manifest(); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", src, err)
	}
	if m, _ := simg.Manifest(); isRAFS(m) {
		return nil, fmt.Errorf("%s is already a RAFS image", src)
	}
	layers, total, err := sourceLayers(simg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if opts.Total != nil {
		opts.Total(total)
	}

	var dict *image.Image
	if opts.ChunkDict != "" {
		if dict, err = image.Open(ctx, opts.ChunkDict, image.Options{Transport: opts.Transport, MaxBootstrapSize: opts.MaxBootstrapSize}); err != nil {
			return nil, fmt.Errorf("chunk dictionary: %w", err)
		}
		defer dict.Close()
		opts.Build.Dict = dict.Bootstrap()
	}

	work, err := os.MkdirTemp(opts.WorkDir, "damselfly-convert-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	opts.Build.BlobDir = work
	opts.Build.Logger = opts.Logger
	res, err := rafs.Build(ctx, layers, opts.Build)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", src, err)
	}

	out, bootLayer, err := assemble(ctx, simg, res, work, dict, opts)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", src, err)
	}
	if err := transport.WriteImage(ctx, dref, out, opts.Transport); err != nil {
		return nil, err
	}
	r := &Result{Source: src, Destination: dst, SourceLayers: total, BootstrapBytes: int64(len(res.Bootstrap)),
		DictBlobs: len(res.DictBlobs), Stats: res.Stats}
	if d, err := simg.Digest(); err == nil {
		r.SourceDigest = d.String()
	}
	if d, err := out.Digest(); err == nil {
		r.Digest = d.String()
	}
	if sz, err := bootLayer.Size(); err == nil {
		r.BootstrapLayer = sz
	}
	r.NewBlobBytes = int64(res.Stats.StoredBytes)
	if opts.Index {
		idx, err := buildIndex(simg, out)
		if err != nil {
			return nil, err
		}
		if err := transport.WriteIndex(ctx, dref, idx, opts.Transport); err != nil {
			return nil, err
		}
		if d, err := idx.Digest(); err == nil {
			r.IndexDigest = d.String()
		}
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// assemble builds the RAFS manifest: blob layers in blob-table order, then
// the bootstrap; the source's config with diff_ids for the new layers.
func assemble(ctx context.Context, src v1.Image, res *rafs.BuildResult, work string, dict *image.Image, opts Options) (v1.Image, v1.Layer, error) {
	cfg, err := src.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("source config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs = nil
	cfg.History = nil
	img, err := mutate.ConfigFile(mutate.MediaType(empty.Image, types.OCIManifestSchema1), cfg)
	if err != nil {
		return nil, nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	isDict := map[int]bool{}
	for _, i := range res.DictBlobs {
		isDict[i] = true
	}
	var adds []mutate.Addendum
	for i, b := range res.Blobs {
		var l v1.Layer
		if isDict[i] {
			if l, err = dictLayer(dict, b); err != nil {
				return nil, nil, err
			}
		} else {
			l = &fileLayer{path: rafs.BlobPath(work, b.Digest), digest: hashOf(b.Digest), size: int64(b.CompressedSize), mt: rafs.MediaTypeBlob}
		}
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: rafs.MediaTypeBlob,
			Annotations: map[string]string{rafs.AnnotationBlobChunks: strconv.FormatUint(uint64(b.ChunkCount), 10)}})
	}
	boot, err := newBootstrapLayer(work, res.Bootstrap)
	if err != nil {
		return nil, nil, err
	}
	adds = append(adds, mutate.Addendum{Layer: boot, MediaType: rafs.MediaTypeBootstrap, Annotations: map[string]string{
		rafs.AnnotationBootstrapDigest: boot.rawDigest,
		rafs.AnnotationBootstrapSize:   strconv.Itoa(len(res.Bootstrap)),
	}})
	if img, err = mutate.Append(img, adds...); err != nil {
		return nil, nil, err
	}
	chunk := opts.Build.ChunkSize
	if chunk == 0 {
		chunk = rafs.DefaultChunkSize
	}
	ann := map[string]string{
		rafs.AnnotationVersion:   strconv.Itoa(rafs.Version),
		rafs.AnnotationChunkSize: strconv.FormatUint(uint64(chunk), 10),
	}
	if d, err := src.Digest(); err == nil {
		ann[rafs.AnnotationSource] = d.String()
	}
	img = mutate.Annotations(img, ann).(v1.Image)
	return img, boot, nil
}

func hashOf(d rafs.Digest) v1.Hash {
	h, _ := v1.NewHash(d.String())
	return h
}

// dictLayer returns the dictionary image's layer for blob b.
func dictLayer(dict *image.Image, b rafs.Blob) (v1.Layer, error) {
	if dict == nil || dict.Manifest == nil {
		return nil, fmt.Errorf("blob %s comes from a local chunk dictionary; convert with a dictionary image reference so its blobs can be copied", b.Digest)
	}
	l, err := dict.Layer(hashOf(b.Digest))
	if err != nil {
		return nil, err
	}
	return &blobLayer{Layer: l, digest: hashOf(b.Digest), size: int64(b.CompressedSize)}, nil
}

// blobLayer presents a dictionary image's blob as a RAFS blob layer. A
// blob is not a compressed tar: go-containerregistry would otherwise sniff
// its first bytes (a zstd frame), take the whole blob for one zstd stream
// and fail at the first chunk stored raw when it needs the DiffID.
type blobLayer struct {
	v1.Layer
	digest v1.Hash
	size   int64
}

func (l *blobLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *blobLayer) Size() (int64, error)                 { return l.size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error)  { return rafs.MediaTypeBlob, nil }
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) { return l.Layer.Compressed() }

// buildIndex makes an index of the plain image and the RAFS one, the
// latter marked by the platform feature.
func buildIndex(src, out v1.Image) (v1.ImageIndex, error) {
	cfg, err := src.ConfigFile()
	if err != nil {
		return nil, err
	}
	p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant, OSVersion: cfg.OSVersion}
	rp := p
	rp.Features = []string{rafs.PlatformFeature}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	return mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: src, Descriptor: v1.Descriptor{Platform: &p}},
		mutate.IndexAddendum{Add: out, Descriptor: v1.Descriptor{Platform: &rp}},
	), nil
}

// isRAFS reports whether m is a RAFS manifest: the version annotation,
// or any layer with a RAFS media type (current or legacy; the current
// ones look like OCI layers by their prefix, and are not tars).
func isRAFS(m *v1.Manifest) bool {
	if m.Annotations[rafs.AnnotationVersion] != "" {
		return true
	}
	for _, l := range m.Layers {
		if rafs.IsMediaType(string(l.MediaType)) {
			return true
		}
	}
	return false
}
