package preheat

import (
	"slices"

	"damselfly/rafs"
)

// blobChunks is the chunks of one blob a preheat fetches, ascending by
// ordinal (the fetch engine then merges adjacent chunks into one origin
// request, rafs/runs.Merge).
type blobChunks struct {
	digest rafs.Digest
	chunks []rafs.Chunk
}

// listChunks lists the chunks to fetch: every chunk of the bootstrap, or
// with prefetchOnly those of the files of its prefetch table; each once,
// grouped by blob.
func listChunks(b *rafs.Bootstrap, prefetchOnly bool) ([]blobChunks, error) {
	blobs, err := b.Blobs()
	if err != nil {
		return nil, err
	}
	seen := make(map[uint32]bool)
	per := make([][]rafs.Chunk, len(blobs))
	add := func(c rafs.Chunk) {
		if !seen[c.Index] {
			seen[c.Index] = true
			per[c.Blob] = append(per[c.Blob], c)
		}
	}
	if prefetchOnly {
		inos, err := b.Prefetch()
		if err != nil {
			return nil, err
		}
		for _, ino := range inos {
			in, err := b.Inode(ino)
			if err != nil {
				return nil, err
			}
			if !in.IsReg() {
				continue
			}
			for i := range in.DataCount {
				c, err := b.FileChunk(in, i)
				if err != nil {
					return nil, err
				}
				add(c)
			}
		}
	} else {
		for i := range b.ChunkCount() {
			c, err := b.Chunk(i)
			if err != nil {
				return nil, err
			}
			add(c)
		}
	}
	var out []blobChunks
	for i, cs := range per {
		if len(cs) == 0 {
			continue
		}
		slices.SortFunc(cs, func(a, b rafs.Chunk) int { return int(int64(a.Ordinal) - int64(b.Ordinal)) })
		out = append(out, blobChunks{digest: blobs[i].Digest, chunks: cs})
	}
	return out, nil
}
