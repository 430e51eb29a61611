package peer

import (
	"strings"
	"testing"
	"time"

	"damselfly/peer/exchange"
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

func TestSplitBatches(t *testing.T) {
	var cs []rafs.Chunk
	for i := range exchange.MaxChunksPerBatch + 10 {
		cs = append(cs, rafs.Chunk{Ordinal: uint32(i), CompressedSize: 1, Size: 1})
	}
	if b := splitBatches(cs); len(b) != 2 || len(b[0]) != exchange.MaxChunksPerBatch {
		t.Errorf("got %d batches, want 2 with the first full", len(b))
	}
	big := []rafs.Chunk{{Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1},
		{Size: 16 << 20, CompressedSize: 1}, {Size: 16 << 20, CompressedSize: 1}}
	if b := splitBatches(big); len(b) != 2 {
		t.Errorf("got %d batches of 5 x 16 MiB, want 2", len(b))
	}
}

func TestNodeConfigValidate(t *testing.T) {
	if err := DefaultNode().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	var zero NodeConfig
	if err := zero.Validate(); err == nil {
		t.Fatal("zero config validated")
	}
}

func TestNodeConfigHedgeDelay(t *testing.T) {
	c := DefaultNode()
	c.HedgeDelay = 0 // hedging off
	if err := c.Validate(); err != nil {
		t.Fatalf("hedge_delay 0: %v", err)
	}
	c.HedgeDelay = -time.Second
	c.SlowAvoidDuration = 0
	err := c.Validate()
	for _, field := range []string{"hedge_delay", "slow_avoid_duration"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("got %v, want an error naming %s", err, field)
		}
	}
}
