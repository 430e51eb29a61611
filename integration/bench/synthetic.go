package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"damselfly/rafs/rafstest"
	"damselfly/rafs/sample"
)

// SampleBytesPerScale is about how many content bytes sample.Generate makes
// per unit of Scale (measured: 109.8 MB at Scale 1).
const SampleBytesPerScale = 109_777_496

// ScaleFor returns the sample scale whose image holds about n content
// bytes.
func ScaleFor(n int64) float64 {
	return float64(n) / SampleBytesPerScale
}

// SampleLayout makes sure cache/<name>/layout holds sample.Generate's image at the
// given scale, tagged "sample", and returns the layout's path. The image
// is generated in memory (about 1.2x its content) and written once; later
// calls with the same scale reuse it.
func SampleLayout(ctx context.Context, cache, name string, scale float64, log io.Writer) (string, error) {
	root := filepath.Join(cache, name)
	dir := filepath.Join(root, "layout")
	stamp := filepath.Join(root, "scale")
	want := strconv.FormatFloat(scale, 'g', -1, 64)
	if old, err := os.ReadFile(stamp); err == nil && string(old) == want {
		return dir, nil
	}
	if err := os.RemoveAll(root); err != nil {
		return "", err
	}
	start := time.Now()
	fmt.Fprintf(log, "%s: generating sample image at scale %s\n", name, want)
	img := sample.Generate("sample", sample.Options{Seed: 1, Scale: scale})
	if err := rafstest.WriteOCILayout(ctx, dir, img); err != nil {
		return "", err
	}
	debug.FreeOSMemory()
	fmt.Fprintf(log, "%s: written in %.0fs\n", name, time.Since(start).Seconds())
	return dir, os.WriteFile(stamp, []byte(want), 0o644)
}

// CorpusPairLayout writes the conformance corpus's shared-base pair,
// "base-v1" and "base-v2", to cache/corpus-pair/layout.
func CorpusPairLayout(ctx context.Context, cache string) (string, error) {
	dir := filepath.Join(cache, "corpus-pair", "layout")
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	var pair []rafstest.Image
	for _, img := range rafstest.Corpus(rafstest.CorpusOptions{}) {
		if img.Name == "base-v1" || img.Name == "base-v2" {
			pair = append(pair, img)
		}
	}
	if len(pair) != 2 {
		return "", fmt.Errorf("corpus has %d of base-v1 and base-v2", len(pair))
	}
	return dir, rafstest.WriteOCILayout(ctx, dir, pair...)
}
