package snapshotter

import (
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
)

func TestLowerDirs(t *testing.T) {
	t.Parallel()
	upper := func(id string) string { return "/root/snapshots/" + id + "/fs" }
	boot := map[string]string{LabelLayer: layerBootstrap, LabelManifest: "sha256:m", LabelImage: "docker://r/app"}
	blob := map[string]string{LabelLayer: layerBlob}
	for _, tt := range []struct {
		name  string
		chain []link // parents, nearest first
		ok    bool
		want  []string
	}{
		{"image only", []link{{id: "3", labels: boot}, {id: "2", labels: blob}, {id: "1", labels: blob}}, true, []string{"/mnt"}},
		{"committed layer on top", []link{{id: "4", labels: nil}, {id: "3", labels: boot}, {id: "2", labels: blob}, {id: "1", labels: blob}}, true, []string{"/root/snapshots/4/fs", "/mnt"}},
		{"blobs only (unpack in progress)", []link{{id: "2", labels: blob}, {id: "1", labels: blob}}, false, nil},
		{"plain image", []link{{id: "2", labels: nil}, {id: "1", labels: nil}}, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			manifest, image, at, ok := rafsImage(tt.chain)
			if ok != tt.ok {
				t.Fatalf("got on RAFS %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if manifest != "sha256:m" || image != "docker://r/app" {
				t.Errorf("got %s %s, want the bootstrap's labels", manifest, image)
			}
			if got := lowerDirs(tt.chain, at, upper, "/mnt"); !slices.Equal(got, tt.want) {
				t.Errorf("got lowers %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOverlayMounts(t *testing.T) {
	t.Parallel()
	opts := []string{"index=off"}
	for _, tt := range []struct {
		name    string
		kind    snapshots.Kind
		lowers  []string
		want    []mount.Mount
		wantErr bool
	}{
		{"active", snapshots.KindActive, []string{"/mnt"}, []mount.Mount{{Type: "overlay", Source: "overlay",
			Options: []string{"workdir=/w", "upperdir=/u", "lowerdir=/mnt", "index=off"}}}, false},
		{"active on two", snapshots.KindActive, []string{"/a", "/mnt"}, []mount.Mount{{Type: "overlay", Source: "overlay",
			Options: []string{"workdir=/w", "upperdir=/u", "lowerdir=/a:/mnt", "index=off"}}}, false},
		{"view of the image", snapshots.KindView, []string{"/mnt"}, []mount.Mount{{Type: "bind", Source: "/mnt", Options: []string{"ro", "rbind"}}}, false},
		{"view of two", snapshots.KindView, []string{"/a", "/mnt"}, []mount.Mount{{Type: "overlay", Source: "overlay",
			Options: []string{"lowerdir=/a:/mnt", "index=off"}}}, false},
		{"committed", snapshots.KindCommitted, []string{"/mnt"}, nil, true},
		{"no lowers", snapshots.KindActive, nil, nil, true},
		{"a colon in a path", snapshots.KindActive, []string{"/a:b"}, nil, true},
		{"a comma in a path", snapshots.KindActive, []string{"/a,b"}, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := overlayMounts(tt.kind, "/u", "/w", tt.lowers, opts)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) || got[0].Type != tt.want[0].Type || got[0].Source != tt.want[0].Source || !slices.Equal(got[0].Options, tt.want[0].Options) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
