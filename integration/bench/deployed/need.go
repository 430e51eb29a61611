package main

import (
	"fmt"

	"damselfly/rafs"
)

// chunkTable is what chunkBytes needs of a bootstrap (*rafs.Bootstrap).
type chunkTable interface {
	LookupPath(p string) (rafs.Inode, error)
	FileChunk(in rafs.Inode, i uint32) (rafs.Chunk, error)
}

var _ chunkTable = (*rafs.Bootstrap)(nil)

// chunkBytes is the stored (compressed) bytes of the distinct chunks
// that hold the regular files paths: what a node must fetch to read
// those files once, whatever serves it. A chunk shared by two files,
// or twice in one, counts once.
func chunkBytes(b chunkTable, paths []string) (int64, error) {
	type key struct{ blob, index uint32 }
	seen := map[key]bool{}
	var n int64
	for _, p := range paths {
		in, err := b.LookupPath(p)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		if !in.IsReg() {
			return 0, fmt.Errorf("%s: not a regular file", p)
		}
		for i := range in.DataCount {
			c, err := b.FileChunk(in, i)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", p, err)
			}
			if k := (key{c.Blob, c.Index}); !seen[k] {
				seen[k] = true
				n += int64(c.CompressedSize)
			}
		}
	}
	return n, nil
}
