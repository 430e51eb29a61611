package rafs

import (
	"strings"
	"testing"
)

// containerd counts a layer only under this prefix (or a Docker type);
// images.IsLayerType in 1.6 and 2.x.
const ociLayerPrefix = "application/vnd.oci.image.layer."

func TestMediaTypes(t *testing.T) {
	for _, tc := range []struct {
		mt                string
		blob, boot, layer bool
	}{
		{MediaTypeBlob, true, false, true},
		{MediaTypeBootstrap, false, true, true},
		{LegacyMediaTypeBlob, true, false, false},
		{LegacyMediaTypeBootstrap, false, true, false},
		{"application/vnd.oci.image.layer.v1.tar+gzip", false, false, true},
		{"application/vnd.oci.image.layer.v1.tar+zstd", false, false, true},
		{"application/vnd.oci.image.layer.nydus.blob.v1", false, false, true},
		{MediaTypeBlob + "+zstd", false, false, true},
		{strings.ToUpper(MediaTypeBlob), false, false, false},
		{"", false, false, false},
	} {
		if got := IsBlobMediaType(tc.mt); got != tc.blob {
			t.Errorf("IsBlobMediaType(%q): got %v, want %v", tc.mt, got, tc.blob)
		}
		if got := IsBootstrapMediaType(tc.mt); got != tc.boot {
			t.Errorf("IsBootstrapMediaType(%q): got %v, want %v", tc.mt, got, tc.boot)
		}
		if got := IsMediaType(tc.mt); got != (tc.blob || tc.boot) {
			t.Errorf("IsMediaType(%q): got %v, want %v", tc.mt, got, tc.blob || tc.boot)
		}
		if got := strings.HasPrefix(tc.mt, ociLayerPrefix); got != tc.layer {
			t.Errorf("%q under containerd's layer prefix: got %v, want %v", tc.mt, got, tc.layer)
		}
	}
}

// The base of each current type (what containerd's DiffCompression
// switches on, the part before any "+") must not be OCI's tar layer
// type: a containerd without the snapshotter would then untar chunk
// data instead of failing.
func TestMediaTypesAreNotTar(t *testing.T) {
	for _, mt := range []string{MediaTypeBlob, MediaTypeBootstrap} {
		base, _, _ := strings.Cut(mt, "+")
		switch base {
		case "application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar":
			t.Errorf("%s: base %s is a tar layer type", mt, base)
		}
	}
}
