package fusemount

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// What a mount daemon writes into the node cache (the image's bootstrap
// under bootstraps/, the chunks it fetched) is its owner's only: 0700
// directories and 0600 files, as the peer daemon's (rafs/cache CACHE.md).
func TestNodeCacheModes(t *testing.T) {
	layout, _ := corpusLayout(t)
	cfg := testConfig(t)
	mp, _, _ := mountT(t, Options{Image: "oci:" + layout + ":sizes-rafs", Config: cfg})
	err := filepath.WalkDir(mp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			_, err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var files, boots int
	err = filepath.WalkDir(cfg.Cache.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		} else {
			files++
			if filepath.Base(filepath.Dir(p)) == "bootstraps" {
				boots++
			}
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: got mode %v, want %v", p, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if boots != 1 || files < 3 {
		t.Errorf("got %d files, %d of them bootstraps; want chunks and one bootstrap", files, boots)
	}
}
