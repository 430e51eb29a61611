package fetch

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// fired reports whether h's hedge has started.
func (h *hedger) hasFired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fired
}

// A parent that is slow but sending (a 4 MiB piece through a shared
// uplink) is not hedged while at least hedgeProgressBytes arrive per
// delay; one that trickles less, or stops, is hedged a delay after its
// last progress.
func TestHedgeWaitsWhileBytesFlow(t *testing.T) {
	const delay = 100 * time.Millisecond
	for _, c := range []struct {
		name  string
		chunk int // bytes per read, one read every 10ms
		want  bool
	}{
		{"steady", 16 << 10, false}, // 1.6 MiB/s: 64 KiB every 40 ms
		{"trickle", 1 << 10, true},  // 100 KiB/s: 64 KiB only every 640 ms
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := &Engine{cfg: Config{HedgeDelay: delay}, log: slog.New(slog.DiscardHandler)}
				g := &group{pending: map[uint32]wanted{}, all: map[uint32]*chunkFlight{}}
				h := e.startHedge(context.Background(), func() {}, g, "", nil)
				for range 50 { // 500 ms of reads
					time.Sleep(10 * time.Millisecond)
					h.bytes(c.chunk)
				}
				synctest.Wait()
				if got := h.hasFired(); got != c.want {
					t.Fatalf("after 500 ms of %d-byte reads every 10 ms: hedged %v, want %v", c.chunk, got, c.want)
				}
				if !c.want {
					// The bytes stop: hedged one delay after the last progress
					// (at 480 ms: every fourth read is 64 KiB).
					time.Sleep(delay - 30*time.Millisecond)
					synctest.Wait()
					if h.hasFired() {
						t.Fatal("hedged before a delay without progress had passed")
					}
					time.Sleep(20 * time.Millisecond)
					synctest.Wait()
					if !h.hasFired() {
						t.Fatal("not hedged a delay after the bytes stopped")
					}
				}
				h.finish()
			})
		})
	}
}
