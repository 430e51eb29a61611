package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// EStargzResult summarises one eStargz conversion.
type EStargzResult struct {
	Source      string  `json:"source"`
	Destination string  `json:"destination"`
	Layers      int     `json:"layers"`
	SourceBytes int64   `json:"source_layer_bytes"` // gzip layers read
	OutputBytes int64   `json:"output_layer_bytes"` // eStargz layers written
	TarBytes    int64   `json:"tar_bytes"`          // uncompressed tar of the output layers
	Seconds     float64 `json:"seconds"`
}

// ConvertEStargz converts the gzip OCI image src (oci:PATH:TAG) to
// eStargz the way the stargz-snapshotter tools do: each layer, one after
// the other, through estargz.Build with its default options (gzip at
// BestCompression, the layer split across GOMAXPROCS workers), each
// output written to disk. It writes an OCI layout at dst with the
// converted manifest tagged "estargz", layers annotated with their TOC
// digest and uncompressed size, so the output is complete like the RAFS
// one.
func ConvertEStargz(ctx context.Context, src, dst string) (*EStargzResult, error) {
	start := time.Now()
	ref, err := transport.Parse(src, transport.Options{})
	if err != nil {
		return nil, err
	}
	if ref.Transport != transport.OCI {
		return nil, fmt.Errorf("%s: only oci: sources are supported", src)
	}
	img, err := transport.ReadImage(ctx, ref, transport.Options{})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	blobs := filepath.Join(dst, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	res := &EStargzResult{Source: src, Destination: "oci:" + dst + ":estargz", Layers: len(layers)}
	var adds []mutate.Addendum
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		out, err := estargzLayer(ctx, filepath.Join(ref.Path, "blobs", d.Algorithm, d.Hex), blobs)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, d, err)
		}
		res.SourceBytes += out.srcSize
		res.OutputBytes += out.size
		res.TarBytes += out.tarSize
		adds = append(adds, mutate.Addendum{Layer: &out.LayerBlob, MediaType: types.OCILayer, Annotations: map[string]string{
			estargz.TOCJSONDigestAnnotation:         out.toc,
			estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(out.tarSize, 10),
		}})
	}
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs = nil
	cfg.History = nil
	base, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), cfg)
	if err != nil {
		return nil, err
	}
	conv, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, err
	}
	p, err := layout.Write(dst, empty.Index)
	if err != nil {
		return nil, err
	}
	if err := p.AppendImage(conv, layout.WithAnnotations(map[string]string{rafstest.RefNameAnnotation: "estargz"})); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

type estargzOut struct {
	LayerBlob
	srcSize int64
	toc     string
}

// estargzLayer converts the gzip layer in file src into blobs/<digest>.
func estargzLayer(ctx context.Context, src, blobs string) (*estargzOut, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	eb, err := estargz.Build(io.NewSectionReader(f, 0, st.Size()), estargz.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(blobs, ".estargz-*.tmp")
	if err != nil {
		eb.Close()
		return nil, err
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	hw := &hashWriter{w: tmp, h: sha256.New()}
	_, err = io.Copy(hw, eb)
	if cerr := eb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	tarSize, err := eb.UncompressedSize()
	if err != nil {
		return nil, err
	}
	diffID, err := v1.NewHash(eb.DiffID().String())
	if err != nil {
		return nil, err
	}
	out := &estargzOut{srcSize: st.Size(), toc: eb.TOCDigest().String()}
	out.digest = v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", hw.h.Sum(nil))}
	out.diffID, out.size, out.tarSize = diffID, hw.n, tarSize
	out.path = filepath.Join(blobs, out.digest.Hex)
	if err := os.Rename(tmp.Name(), out.path); err != nil {
		return nil, err
	}
	return out, nil
}
