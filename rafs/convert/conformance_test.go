package convert_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// TestConformanceWithUmoci is the correctness oracle: for every image of
// the corpus, unpacking the converted RAFS image must give exactly what
// umoci unpack gives for the source image.
func TestConformanceWithUmoci(t *testing.T) {
	rafstest.RequireRoot(t)
	rafstest.RequireTool(t, "umoci")
	for _, tc := range []struct {
		name  string
		chunk int
		large bool
		// prefetch patterns: the files they name are stored in a blob of
		// their own, which must not change what unpacks.
		prefetch []string
		digest   rafs.DigestAlgo // 0: the default, BLAKE3
	}{
		{"1MiB", 1 << 20, !testing.Short(), nil, 0},
		{"64KiB-sha256", 64 << 10, false, []string{"/*[aeiou]*", "/*/*[0-9]*"}, rafs.DigestSHA256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			layout := filepath.Join(dir, "oci")
			imgs := rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: tc.chunk, Large: tc.large})
			if err := rafstest.WriteOCILayout(ctx, layout, imgs...); err != nil {
				t.Fatal(err)
			}
			prefetchChunks := 0
			defer func() {
				if tc.prefetch != nil && prefetchChunks == 0 && !t.Failed() {
					t.Errorf("patterns %q put no chunk of the corpus in a prefetch blob", tc.prefetch)
				}
			}()
			for _, img := range imgs {
				t.Run(img.Name, func(t *testing.T) {
					want, err := rafstest.UmociUnpack(ctx, layout, img.Name, filepath.Join(dir, "umoci-"+img.Name))
					if err != nil {
						t.Fatal(err)
					}
					dst := "oci:" + layout + ":" + img.Name + "-rafs"
					res, err := convert.Convert(ctx, "oci:"+layout+":"+img.Name, dst, convert.Options{
						Build: rafs.BuildOptions{ChunkSize: uint32(tc.chunk), Prefetch: tc.prefetch, Digest: tc.digest}, WorkDir: dir,
					})
					if err != nil {
						t.Fatal(err)
					}
					prefetchChunks += res.Stats.PrefetchChunks
					ri, err := image.Open(ctx, dst, image.Options{Transport: transport.Options{}})
					if err != nil {
						t.Fatal(err)
					}
					defer ri.Close()
					if err := ri.Bootstrap().Validate(); err != nil {
						t.Fatal(err)
					}
					got := filepath.Join(dir, "rafs-"+img.Name)
					if err := rafs.Unpack(ctx, ri.Bootstrap(), ri.ChunkSource(), got, rafs.UnpackOptions{}); err != nil {
						t.Fatal(err)
					}
					if diff := rafstest.CompareTreesWith(want, got, rafstest.CompareOptions{IgnoreMtime: img.ImplicitDirs()}); len(diff) > 0 {
						t.Errorf("unpacked RAFS image differs from umoci unpack (want=umoci, got=rafs):\n%s", strings.Join(diff, "\n"))
					}
					os.RemoveAll(want)
					os.RemoveAll(got)
				})
			}
		})
	}
}
