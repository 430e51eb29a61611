package scheduler

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Every method may be called from many goroutines at once (run with -race).
func TestConcurrentUse(t *testing.T) {
	s := newState(t, func(c *Config) { c.Jitter = 0.1; c.BanQuorum = 1 })
	const workers, steps = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := newRand(uint64(w))
			id := fmt.Sprint("w", w)
			now := t0
			if err := s.Register(id, PeerInfo{Labels: labels("z", "", id)}, now); err != nil {
				t.Error(err)
				return
			}
			for i := range steps {
				now = now.Add(time.Millisecond)
				blob := digest(fmt.Sprint(rng.IntN(3)))
				c := uint32(rng.IntN(50))
				switch rng.IntN(6) {
				case 0:
					_ = s.Heartbeat(id, Load{ActiveUploads: i % 3}, now)
				case 1, 2:
					_, _ = s.Announce(id, blob, []uint32{c, c + 1}, now)
				case 3:
					a, err := s.Parents(id, blob, []uint32{c, c + 1, c + 2}, now)
					if err != nil {
						t.Error(err)
						return
					}
					for _, p := range a.Parents {
						_, _ = s.Report(id, p.ID, Outcome{Blob: blob, OK: rng.IntN(4) > 0, BadBytes: rng.IntN(50) == 0, BadChunk: p.Chunks[0]}, now)
					}
				case 4:
					_ = s.Drop(id, blob, []uint32{c}, now)
				default:
					s.Expire(now)
					_ = s.Peers(now)
					_ = s.Blobs()
					_ = s.OriginFetches(now)
					_ = s.Bans(now)
				}
			}
		})
	}
	wg.Wait()
}
