package snapshotter

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
)

func digest(c byte) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(string(c), 64)}
}

func TestLayerKind(t *testing.T) {
	t.Parallel()
	rafsManifest := &v1.Manifest{
		Annotations: map[string]string{rafs.AnnotationVersion: "1"},
		Layers: []v1.Descriptor{
			{MediaType: types.MediaType(rafs.MediaTypeBlob), Digest: digest('a')},
			{MediaType: types.MediaType(rafs.MediaTypeBlob), Digest: digest('b')},
			{MediaType: types.MediaType(rafs.MediaTypeBootstrap), Digest: digest('c')},
		},
	}
	legacyManifest := &v1.Manifest{
		Annotations: map[string]string{rafs.AnnotationVersion: "1"},
		Layers: []v1.Descriptor{
			{MediaType: types.MediaType(rafs.LegacyMediaTypeBlob), Digest: digest('a')},
			{MediaType: types.MediaType(rafs.LegacyMediaTypeBootstrap), Digest: digest('c')},
		},
	}
	// Legacy media types alone, without the annotation, still mark a
	// RAFS manifest.
	legacyUnannotated := &v1.Manifest{Layers: []v1.Descriptor{
		{MediaType: types.OCILayer, Digest: digest('a')},
		{MediaType: types.MediaType(rafs.LegacyMediaTypeBlob), Digest: digest('b')},
	}}
	plain := &v1.Manifest{Layers: []v1.Descriptor{
		{MediaType: types.OCILayer, Digest: digest('a')},
		{MediaType: types.DockerLayer, Digest: digest('b')},
	}}
	// RAFS media types without the manifest annotation are still RAFS,
	// and a tar layer among them is refused rather than untarred.
	mixed := &v1.Manifest{Layers: []v1.Descriptor{
		{MediaType: types.OCILayer, Digest: digest('a')},
		{MediaType: types.MediaType(rafs.MediaTypeBootstrap), Digest: digest('c')},
	}}
	annotatedTar := &v1.Manifest{
		Annotations: map[string]string{rafs.AnnotationVersion: "1"},
		Layers:      []v1.Descriptor{{MediaType: types.OCILayer, Digest: digest('a')}},
	}
	for _, tt := range []struct {
		name    string
		m       *v1.Manifest
		layer   v1.Hash
		want    string
		wantErr string
	}{
		{"RAFS blob", rafsManifest, digest('b'), layerBlob, ""},
		{"RAFS bootstrap", rafsManifest, digest('c'), layerBootstrap, ""},
		{"legacy RAFS blob", legacyManifest, digest('a'), layerBlob, ""},
		{"legacy RAFS bootstrap", legacyManifest, digest('c'), layerBootstrap, ""},
		{"tar layer beside a legacy RAFS blob", legacyUnannotated, digest('a'), "", "neither a RAFS blob nor a bootstrap"},
		{"plain OCI layer", plain, digest('a'), "", ""},
		{"plain Docker layer", plain, digest('b'), "", ""},
		{"tar layer in a RAFS manifest", mixed, digest('a'), "", "neither a RAFS blob nor a bootstrap"},
		{"tar layer in an annotated manifest", annotatedTar, digest('a'), "", "neither a RAFS blob nor a bootstrap"},
		{"layer not in the manifest", rafsManifest, digest('d'), "", "layer not in manifest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := layerKind(tt.m, tt.layer.String())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, tt.wantErr)
				}
				if tt.wantErr == "layer not in manifest" && !errors.Is(err, ErrNotInManifest) {
					t.Errorf("got %v, want ErrNotInManifest", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
