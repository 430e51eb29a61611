package fusemount

import (
	"context"
	"testing"
)

// A caller that has joined a flight keeps its run alive though every
// earlier caller gives up before the joiner begins to wait: the run is
// not cancelled under it. (A reader of a chunk whose first reader had
// already given up got that reader's cancellation, seen once in CI.)
func TestFlightJoinerKeepsRun(t *testing.T) {
	var g flightGroup
	fl, rctx, leader := g.start(context.Background(), 7)
	if !leader {
		t.Fatal("first start is not the leader")
	}
	joined, _, leader2 := g.start(context.Background(), 7)
	if leader2 || joined != fl {
		t.Fatal("second start did not join the flight")
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := g.wait(gone, fl); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	if rctx.Err() != nil {
		t.Fatal("the run was cancelled while a joiner still held its flight")
	}
	g.complete(fl, []byte("data"), SourceCache, nil)
	val, _, err := g.wait(context.Background(), joined)
	if err != nil || string(val) != "data" {
		t.Fatalf("joiner got %q, %v; want the run's bytes", val, err)
	}

	// The last caller to give up still cancels a run whose head has not
	// arrived, and the next caller starts afresh.
	fl, rctx, _ = g.start(context.Background(), 8)
	if _, _, err := g.wait(gone, fl); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	if rctx.Err() == nil {
		t.Fatal("a run nobody waits for was not cancelled")
	}
	if _, _, leader := g.start(context.Background(), 8); !leader {
		t.Fatal("a caller after the abandoned run joined it")
	}
}
