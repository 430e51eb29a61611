package erofs_test

import (
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/erofs"
)

// FuzzBuild lays out hostile bootstraps: Build must return an error or
// an image whose every range maps, never panic or run away.
func FuzzBuild(f *testing.F) {
	for name, img := range convertCorpus(f) {
		if name == "hardlinks" || name == "meta" || name == "symlinks" || name == "devices" || name == "erofs-edges" {
			f.Add(img.Bootstrap().Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := rafs.Decode(data, rafs.OpenOptions{SkipChecksum: true})
		if err != nil {
			return
		}
		im, err := erofs.Build(b)
		if err != nil {
			return
		}
		if im.Size()%erofs.BlockSize != 0 || im.MetadataSize() > im.Size() {
			t.Fatalf("image of %d bytes with %d of metadata", im.Size(), im.MetadataSize())
		}
		n := 0
		if err := im.Pieces(0, int(min(im.Size(), 1<<20)), func(p erofs.Piece) error {
			n += p.Len
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
