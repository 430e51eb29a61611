package transport

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// checkPlatforms reads r, an index of imgs for linuxAMD64 and linuxARM64,
// for several platforms and checks which image each resolves to.
func checkPlatforms(t *testing.T, r Ref, imgs []v1.Image) {
	t.Helper()
	tests := []struct {
		name     string
		platform v1.Platform
		want     int // index into imgs, or -1 for ErrNoPlatform
	}{
		{"amd64", linuxAMD64, 0},
		{"arm64 with variant", linuxARM64, 1},
		{"arm64 without variant", v1.Platform{OS: "linux", Architecture: "arm64"}, 1},
		{"missing", linuxS390X, -1},
	}
	for _, tt := range tests {
		got, err := ReadImage(t.Context(), r, Options{Platform: &tt.platform})
		if tt.want < 0 {
			if !errors.Is(err, ErrNoPlatform) {
				t.Errorf("%s: got error %v, want ErrNoPlatform", tt.name, err)
				continue
			}
			for _, s := range []string{"read image " + r.String(), "linux/s390x", "linux/amd64, linux/arm64/v8"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: got error %q, want it to contain %q", tt.name, err, s)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if g, w := digest(t, got), digest(t, imgs[tt.want]); g != w {
			t.Errorf("%s: got image %s, want %s", tt.name, g, w)
		}
	}
}

func TestImageForPlatformNested(t *testing.T) {
	t.Parallel()
	inner, imgs := platformIndex(t, linuxARM64)
	outer := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: inner})
	got, err := imageForPlatform(outer, linuxARM64)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := digest(t, got), digest(t, imgs[0]); g != w {
		t.Errorf("got %s, want %s", g, w)
	}
	if _, err := imageForPlatform(empty.Index, linuxAMD64); !errors.Is(err, ErrNoPlatform) || !strings.Contains(err.Error(), "available: none") {
		t.Errorf("empty index: got %v, want ErrNoPlatform listing none", err)
	}
}

func TestImageForPlatformFromConfig(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture = "linux", "riscv64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	// The descriptor carries no platform; the config does.
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img})
	got, err := imageForPlatform(idx, v1.Platform{OS: "linux", Architecture: "riscv64"})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := digest(t, got), digest(t, img); g != w {
		t.Errorf("got %s, want %s", g, w)
	}
}
