package bench

import (
	"path/filepath"
	"testing"

	"damselfly/rafs/convert"
)

// TestCheckDedup converts the corpus's shared-base pair in process: with
// v1 as chunk dictionary the check must pass, and without one it must
// find v2 storing v1's chunks again.
func TestCheckDedup(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	src, err := CorpusPairLayout(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	out := "oci:" + filepath.Join(dir, "rafs")
	conv := func(tag, dst, dict string) {
		t.Helper()
		if _, err := convert.Convert(ctx, "oci:"+src+":"+tag, out+":"+dst, convert.Options{ChunkDict: dict, WorkDir: dir}); err != nil {
			t.Fatal(err)
		}
	}
	conv("base-v1", "v1", "")
	conv("base-v2", "v2", out+":v1")
	conv("base-v2", "v2-alone", "")

	c, err := CheckDedup(ctx, out+":v1", out+":v2")
	if err != nil {
		t.Fatal(err)
	}
	if !c.OK() || c.Shared == 0 || c.Unique == 0 || c.NewBlobs != 1 {
		t.Errorf("with the dictionary: got %+v, want OK with shared and unique chunks in one new blob", c)
	}
	alone, err := CheckDedup(ctx, out+":v1", out+":v2-alone")
	if err != nil {
		t.Fatal(err)
	}
	if alone.OK() || alone.Duplicates == 0 {
		t.Errorf("without the dictionary: got %+v, want duplicates found", alone)
	}
}
