package bench

import (
	"os"
	"path/filepath"
	"testing"

	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/sample"
)

// BenchmarkConvert converts the synthetic sample image (about 110 MB of
// content in three gzip layers) in process; MB/s is of uncompressed
// content. Run with -benchtime=3x.
func BenchmarkConvert(b *testing.B) {
	ctx := b.Context()
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	if err := rafstest.WriteOCILayout(ctx, src, sample.Generate("sample", sample.Options{Seed: 1, Scale: 1})); err != nil {
		b.Fatal(err)
	}
	if err := WarmLayout(src); err != nil {
		b.Fatal(err)
	}
	dst := filepath.Join(dir, "rafs")
	var res *convert.Result
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var err error
		if res, err = convert.Convert(ctx, "oci:"+src+":sample", "oci:"+dst+":rafs", convert.Options{WorkDir: dir}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(res.Stats.ContentBytes))
	}
	b.ReportMetric(float64(res.NewBlobBytes)/float64(res.SourceLayers), "blobs/gzip")
	b.ReportMetric(float64(res.BootstrapBytes)/float64(res.Stats.Files+res.Stats.Dirs+res.Stats.Others), "bootstrap-B/inode")
}
