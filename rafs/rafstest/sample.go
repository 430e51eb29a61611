package rafstest

import (
	"context"
	"io"

	"damselfly/rafs/sample"
)

// RefNameAnnotation is the index annotation that carries an image's tag.
const RefNameAnnotation = sample.RefNameAnnotation

// errShortData reports that an entry's Data wrote fewer bytes than its header
// promised.
var errShortData = sample.ErrShortData

// WriteOCILayout writes imgs into one OCI image layout at dir; see
// sample.WriteOCILayout, which it calls.
func WriteOCILayout(ctx context.Context, dir string, imgs ...Image) error {
	return sample.WriteOCILayout(ctx, dir, imgs...)
}

// WriteLayerTar writes l to w as an uncompressed tar stream; see
// sample.WriteLayerTar, which it calls.
func WriteLayerTar(w io.Writer, l Layer) error {
	return sample.WriteLayerTar(w, l)
}
