package sample

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// TestGenerateDeterministic checks that a seed fixes every byte of the image,
// which the benchmarks' caches and the demo's startup set rely on.
func TestGenerateDeterministic(t *testing.T) {
	t.Parallel()
	sum := func(img Image) [][32]byte {
		var out [][32]byte
		for i, l := range img.Layers {
			h := sha256.New()
			if err := WriteLayerTar(h, l); err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			out = append(out, [32]byte(h.Sum(nil)))
		}
		return out
	}
	a := sum(Generate("a", Options{Seed: 3, Scale: 0.02}))
	b := sum(Generate("a", Options{Seed: 3, Scale: 0.02}))
	c := sum(Generate("a", Options{Seed: 4, Scale: 0.02}))
	if len(a) != 3 {
		t.Fatalf("got %d layers, want 3", len(a))
	}
	for i := range a {
		if !bytes.Equal(a[i][:], b[i][:]) {
			t.Errorf("layer %d: same seed, different bytes", i)
		}
		if bytes.Equal(a[i][:], c[i][:]) {
			t.Errorf("layer %d: different seeds, same bytes", i)
		}
	}
	img := Generate("a", Options{Seed: 3, Scale: 0.02})
	if got := StartupSet(img); len(got) == 0 {
		t.Errorf("got an empty startup set")
	}
}
