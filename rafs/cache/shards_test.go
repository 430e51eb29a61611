package cache

import (
	"os"
	"path/filepath"
	"testing"
)

// Open creates every shard, and opening again over them is fine.
func TestOpenMakesShards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for range 2 {
		c, err := Open(Default(dir))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	ents, err := os.ReadDir(filepath.Join(dir, chunksDirName))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() && isShardName(e.Name()) {
			n++
		}
	}
	if n != 256 || len(ents) != 256 {
		t.Errorf("%d shard directories of %d entries, want 256 of 256", n, len(ents))
	}
}
