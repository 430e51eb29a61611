package fetch

import (
	"fmt"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
)

// chunkError is ReadChunks' error for chunk i, which was not delivered.
func chunkError(i int, transient bool, err error) error {
	return &chunkapi.ChunkError{Index: i, Transient: transient, Err: err}
}

// checkChunk refuses a chunk description no blob can hold, before
// anything is allocated for it.
func checkChunk(c rafs.Chunk) error {
	if c.Size == 0 || c.Size > rafs.MaxChunkSize || c.CompressedSize == 0 || c.CompressedSize > rafs.MaxChunkSize {
		return fmt.Errorf("chunk %s: sizes %d stored, %d plain are outside 1..%d", c.Digest, c.CompressedSize, c.Size, rafs.MaxChunkSize)
	}
	if !c.Compressed() && c.CompressedSize != c.Size {
		return fmt.Errorf("chunk %s: raw but stored size %d differs from size %d", c.Digest, c.CompressedSize, c.Size)
	}
	return nil
}
