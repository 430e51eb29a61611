package fetch

import (
	"testing"

	"damselfly/rafs"
)

func TestOriginRuns(t *testing.T) {
	cs := []rafs.Chunk{
		{Ordinal: 2, CompressedOffset: 200, CompressedSize: 100},
		{Ordinal: 0, CompressedOffset: 0, CompressedSize: 100},
		{Ordinal: 1, CompressedOffset: 100, CompressedSize: 100},
		{Ordinal: 4, CompressedOffset: 500, CompressedSize: 100}, // gap before it
		{Ordinal: 5, CompressedOffset: 600, CompressedSize: 1000},
	}
	runs := originRuns(cs, 300)
	type span struct{ off, end int64 }
	var got []span
	for _, r := range runs {
		got = append(got, span{r.off, r.end})
	}
	want := []span{{0, 300}, {500, 600}, {600, 1600}}
	if len(got) != len(want) {
		t.Fatalf("got runs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("run %d: got %v, want %v", i, got[i], want[i])
		}
	}
}
