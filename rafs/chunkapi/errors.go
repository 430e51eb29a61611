package chunkapi

import "fmt"

// ChunkError names the first chunk of a ReadChunks call that was not
// delivered, and whether asking again may succeed: Transient is true for
// network failures, upstream 5xx/429 and timeouts, false for upstream
// 4xx, chunks that fail verification and protocol violations.
type ChunkError struct {
	// Index is the chunk's position in the chunks slice given to
	// ReadChunks.
	Index     int
	Transient bool
	Err       error
}

func (e *ChunkError) Error() string {
	kind := "permanent"
	if e.Transient {
		kind = "transient"
	}
	return fmt.Sprintf("chunk %d (%s): %v", e.Index, kind, e.Err)
}

func (e *ChunkError) Unwrap() error { return e.Err }
