package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/zstd"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/transport"
)

// buildWithDict is the dedup scenario's fallback when `damselfly convert
// --chunk-dict` cannot write its output image: it runs the same builder,
// rafs.Build, in process over src's layers with dict's bootstrap as the
// chunk dictionary, keeps the new blobs and the bootstrap in dir, and
// returns what convert would have reported and the bootstrap's path.
func buildWithDict(ctx context.Context, src, dict, dir string) (*convert.Result, string, error) {
	start := time.Now()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	di, err := image.Open(ctx, dict, image.Options{})
	if err != nil {
		return nil, "", err
	}
	defer di.Close()
	ref, err := transport.Parse(src, transport.Options{})
	if err != nil {
		return nil, "", err
	}
	img, err := transport.ReadImage(ctx, ref, transport.Options{})
	if err != nil {
		return nil, "", err
	}
	ls, err := img.Layers()
	if err != nil {
		return nil, "", err
	}
	res := &convert.Result{Source: src, Destination: dir}
	var layers []rafs.LayerSource
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			return nil, "", err
		}
		sz, err := l.Size()
		if err != nil {
			return nil, "", err
		}
		res.SourceLayers += sz
		layers = append(layers, rafs.LayerSource{Name: d.String(), Open: func(context.Context) (io.ReadCloser, error) {
			return l.Uncompressed()
		}})
	}
	br, err := rafs.Build(ctx, layers, rafs.BuildOptions{Dict: di.Bootstrap(), BlobDir: dir})
	if err != nil {
		return nil, "", err
	}
	boot := filepath.Join(dir, "bootstrap")
	if err := os.WriteFile(boot, br.Bootstrap, 0o644); err != nil {
		return nil, "", err
	}
	// The bootstrap layer as convert stores it: zstd at its better level.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, "", err
	}
	res.BootstrapLayer = int64(len(enc.EncodeAll(br.Bootstrap, nil)))
	enc.Close()
	res.BootstrapBytes = int64(len(br.Bootstrap))
	res.NewBlobBytes = int64(br.Stats.StoredBytes)
	res.DictBlobs = len(br.DictBlobs)
	res.Stats = br.Stats
	res.Seconds = time.Since(start).Seconds()
	if len(br.DictBlobs) == 0 && br.Stats.DictChunks > 0 {
		return nil, "", fmt.Errorf("%d dictionary chunks but no dictionary blob", br.Stats.DictChunks)
	}
	return res, boot, nil
}
