package exchange

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestLimiterFair checks that two peers share the limit evenly although
// one has three times as many streams waiting, and that the total stays
// within the rate.
//
// Not parallel: the share b gets depends on its one goroutine being back
// in Wait when its turn comes, which the package's other tests, run
// beside it on a loaded 2-core machine, can delay.
func TestLimiterFair(t *testing.T) {
	const rate = 8 << 20
	burst := ServerConfig{UploadBytesPerSec: rate}.burst()
	l := newFairLimiter(rate, burst)
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var a, b atomic.Int64
	var wg sync.WaitGroup
	stream := func(p peer.ID, n *atomic.Int64) {
		wg.Go(func() {
			for l.Wait(ctx, p, sliceSize) == nil {
				n.Add(sliceSize)
			}
		})
	}
	start := time.Now()
	for range 3 {
		stream("a", &a)
	}
	stream("b", &b)
	wg.Wait()
	took := time.Since(start)
	total := float64(a.Load()+b.Load()-int64(burst)) / took.Seconds() // the bucket starts full
	t.Logf("a %d, b %d bytes in %v: %.2f MiB/s", a.Load(), b.Load(), took, total/(1<<20))
	// The full bucket at the start goes to whoever comes first; after
	// that the peers alternate. Shared per stream, b (one stream of four)
	// would get a quarter; shared per peer, half. A loaded machine adds
	// noise (31% was seen at a load average of 29 under -race), so the
	// check sits between the two, nearer the quarter.
	after := a.Load() + b.Load() - int64(burst)
	for name, got := range map[string]int64{"a": a.Load(), "b": b.Load()} {
		if float64(got) < 0.30*float64(after) {
			t.Errorf("peer %s got %d of %d bytes after the initial burst, want at least 30%% (an even share is 50%%, a share per stream 25%%)", name, got, after)
		}
	}
	if total > 1.2*rate {
		t.Errorf("rate %.0f B/s exceeds the limit %d by more than 20%%", total, rate)
	}
	if total < 0.05*rate { // a loaded CI machine under -race only slows it
		t.Errorf("rate %.0f B/s, want at least a twentieth of %d: the limiter stalls", total, rate)
	}
}

func TestLimiterCancel(t *testing.T) {
	t.Parallel()
	l := newFairLimiter(1, sliceSize) // one byte a second: nothing after the first
	defer l.Close()
	if err := l.Wait(t.Context(), "a", sliceSize); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := l.Wait(ctx, "a", sliceSize); err == nil {
		t.Fatal("second wait succeeded, want the context's error")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) != 0 || len(l.queues) != 0 {
		t.Fatalf("cancelled waiter left queued: ring %v", l.ring)
	}
}

func TestLimiterNil(t *testing.T) {
	t.Parallel()
	var l *fairLimiter = newFairLimiter(0, sliceSize)
	if l != nil {
		t.Fatal("rate 0 gave a limiter, want nil (unlimited)")
	}
	if err := l.Wait(t.Context(), "a", 1<<30); err != nil {
		t.Fatal(err)
	}
	l.Close()
}
