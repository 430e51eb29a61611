package fetch

import (
	"testing"

	"damselfly/peer/exchange"
	"damselfly/rafs"
)

func TestBatches(t *testing.T) {
	var cs []rafs.Chunk
	for i := range exchange.MaxChunksPerBatch + 10 {
		cs = append(cs, rafs.Chunk{Ordinal: uint32(i), CompressedSize: 1, Size: 1})
	}
	if b := batches(cs, exchangeLimits); len(b) != 2 || len(b[0]) != exchange.MaxChunksPerBatch {
		t.Errorf("got %d batches, want 2 with the first full", len(b))
	}
	big := []rafs.Chunk{{Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1},
		{Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1}}
	if b := batches(big, exchangeLimits); len(b) != 2 {
		t.Errorf("got %d batches of 5 x 16 MiB, want 2", len(b))
	}
}
