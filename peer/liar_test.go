package peer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/scheduler"
)

// A peer that announces every chunk of a blob and holds none: the readers
// it is named to get "not found", fetch elsewhere and report it
// (Outcome.Missing); the scheduler takes the chunks off its holdings and
// holds back its announcements of them for a while (refute_duration). It
// lies again and again here, re-announcing all the chunks every 20 ms,
// while readers on four nodes read the blob at once, then four more one
// after the other, each leaving when it is done.
func TestLyingPeer(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	// Long enough that the second wave, however slow the machine, comes
	// while the liar's chunks are refuted.
	sched := newSchedulerWith(t, func(c *scheduler.Config) { c.RefuteDuration = time.Minute })
	key := clusterKey(t)
	liar := newNode(t, key, sched, nodeOpts{})
	var waves [2][]*node
	for w := range waves {
		for range 4 {
			waves[w] = append(waves[w], newNode(t, key, sched, nodeOpts{}))
		}
	}
	all := make([]uint32, len(img.chunks))
	for i, c := range img.chunks {
		all[i] = c.Ordinal
	}
	ctx := testCtx(t)
	lctx, stopLying := context.WithCancel(ctx)
	var lying sync.WaitGroup
	lying.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			liar.router.Announce(img.blob, all)
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopLying(); lying.Wait() }()

	var attempted, failed atomic.Int64
	read := func(r *node) {
		attempted.Add(1)
		if err := readAll(ctx, r.Node, o.ref(), img.blob, img.chunks); err != nil {
			failed.Add(1)
			t.Errorf("read: %v", err)
		}
	}
	// Wave 0: four readers at once.
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range waves[0] {
		wg.Go(func() { read(r) })
	}
	wg.Wait()
	asked0 := liar.srv.Stats().Streams
	t.Logf("measured: wave 0: %d reads at once in %v, the liar asked %d times", len(waves[0]), time.Since(start).Round(time.Millisecond), asked0)
	// Wave 1: readers one after the other, each leaving after its read
	// (its holdings dropped), so that the liar is again the only peer
	// that claims the chunks when the next one asks.
	for _, r := range waves[0] {
		r.router.Drop(img.blob, all)
	}
	start = time.Now()
	for _, r := range waves[1] {
		read(r)
		r.router.Drop(img.blob, all)
	}
	asked1 := liar.srv.Stats().Streams - asked0
	t.Logf("measured: wave 1: %d reads one after the other in %v, the liar asked %d times", len(waves[1]), time.Since(start).Round(time.Millisecond), asked1)
	stopLying()
	lying.Wait()
	ls := liar.srv.Stats()
	missingReports := 0
	for _, readers := range waves {
		for _, r := range readers {
			_, _, rs := r.router.snapshot()
			for _, x := range rs {
				if len(x.Missing) > 0 {
					missingReports++
				}
			}
		}
	}
	t.Logf("measured: %d reads of %d chunks, %d failed, 0 bad bytes (every chunk verified); the liar answered %d requests, %d chunks not found; %d reports named missing chunks; origin sent %d B (blob %d B)",
		attempted.Load(), len(img.chunks), failed.Load(), ls.Streams, ls.ChunksNotFound, missingReports, o.bytes.Load(), storedBytes(img.chunks))
	if ls.ChunksSent != 0 {
		t.Errorf("the liar sent %d chunks; it holds none", ls.ChunksSent)
	}
	if asked0 == 0 {
		t.Fatal("the liar was never asked: the test did not test a liar")
	}
	if missingReports == 0 {
		t.Errorf("the liar was asked %d times and nobody reported missing chunks", ls.Streams)
	}
	if asked1 != 0 {
		t.Errorf("the liar was asked %d times in wave 1, want 0: its refuted announcements were taken again", asked1)
	}
}
