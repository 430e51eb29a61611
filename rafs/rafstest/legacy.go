package rafstest

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// LegacyMediaTypes returns the RAFS image img as converters before
// 2026-12-04 wrote it: the same config, blobs, bootstrap and
// annotations, its layers under the legacy media types
// (application/vnd.damselfly.rafs.*). Readers must keep opening such
// images, which stay in registries. It fails unless every layer of img
// has a current RAFS media type.
func LegacyMediaTypes(img v1.Image) (v1.Image, error) {
	to := map[types.MediaType]types.MediaType{
		MediaTypeBlob:      LegacyMediaTypeBlob,
		MediaTypeBootstrap: LegacyMediaTypeBootstrap,
	}
	return RetypeLayers(img, func(i int, mt types.MediaType) (types.MediaType, error) {
		if legacy, ok := to[mt]; ok {
			return legacy, nil
		}
		return "", fmt.Errorf("layer %d has media type %q, not a current RAFS one", i, mt)
	})
}

// RetypeLayers returns img with layer i's media type replaced by what
// retype(i, its type) returns, everything else as it was (so the
// manifest's digest changes, and nothing else): for tests of readers
// given media types they must accept or refuse. An error from retype is
// returned.
func RetypeLayers(img v1.Image, retype func(i int, mt types.MediaType) (types.MediaType, error)) (v1.Image, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	m = m.DeepCopy()
	byDigest := map[v1.Hash]types.MediaType{}
	for i := range m.Layers {
		l := &m.Layers[i]
		mt, err := retype(i, l.MediaType)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, l.Digest, err)
		}
		l.MediaType = mt
		byDigest[l.Digest] = mt
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&retyped{src: img, raw: raw, mt: mt, layerTypes: byDigest})
}

// retyped is an image whose manifest is raw and whose layers are src's
// with the media types layerTypes gives them.
type retyped struct {
	src        v1.Image
	raw        []byte
	mt         types.MediaType
	layerTypes map[v1.Hash]types.MediaType
}

func (r *retyped) RawConfigFile() ([]byte, error)      { return r.src.RawConfigFile() }
func (r *retyped) MediaType() (types.MediaType, error) { return r.mt, nil }
func (r *retyped) RawManifest() ([]byte, error)        { return r.raw, nil }

func (r *retyped) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	l, err := r.src.LayerByDigest(h)
	if err != nil {
		return nil, err
	}
	if mt, ok := r.layerTypes[h]; ok {
		return retypedLayer{Layer: l, mt: mt}, nil
	}
	return l, nil
}

// retypedLayer is a layer with another media type.
type retypedLayer struct {
	v1.Layer
	mt types.MediaType
}

func (l retypedLayer) MediaType() (types.MediaType, error) { return l.mt, nil }
