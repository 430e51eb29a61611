package scheduler

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs"
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
					_, _ = s.Drop(id, blob, []uint32{c}, now)
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

// Queries and reports record under the read lock, concurrently with each
// other and with changes under the write lock. Afterwards (run with
// -race) the bookkeeping they share must add up: every lease is in its
// blob's index and counted once as its parent's load, scores match the
// counts, origin turns are counted by their holders, and no empty blob
// is kept.
func TestConcurrentRecording(t *testing.T) {
	s := newState(t, func(c *Config) { c.Jitter = 0.1; c.LeaseTimeout = 40 * time.Millisecond })
	// The h* hold all of b. Worker w alone holds chunk 0 of its own d<w>,
	// announcing and dropping it, and asks for chunk 0 of its
	// neighbour's, so that a d blob is often kept by a lease alone, and
	// forgotten when the lease ends.
	for i := range 6 {
		id := fmt.Sprint("h", i)
		mustRegister(t, s, id, nil, t0)
		mustAnnounce(t, s, id, digest("b"), seq(uint32(i*8), uint32(i*8+24)), t0)
	}
	var clock atomic.Int64
	now := func() time.Time { return t0.Add(time.Duration(clock.Add(int64(100 * time.Microsecond)))) }
	const workers = 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := newRand(uint64(w) + 100)
			id := fmt.Sprint("w", w)
			own, next := digest(fmt.Sprint("d", w)), digest(fmt.Sprint("d", (w+1)%workers))
			if err := s.Register(id, PeerInfo{}, now()); err != nil {
				t.Error(err)
				return
			}
			var last Answer
			var lastBlob rafs.Digest
			for range 3000 {
				runtime.Gosched() // interleave the workers more finely
				switch op := rng.IntN(20); {
				case op < 8:
					// Report on the last answer, which may be
					// stale by now, and ask again.
					for _, p := range last.Parents {
						o := Outcome{Blob: lastBlob, OK: true}
						if rng.IntN(8) == 0 {
							o.OK, o.Missing = false, p.Chunks[:1]
						}
						_, _ = s.Report(id, p.ID, o, now())
					}
					if len(last.Origin) > 0 {
						_, _ = s.AbandonOrigin(id, lastBlob, last.Origin, now())
					}
					blob, chunks := next, []uint32{0}
					if rng.IntN(2) == 0 {
						c := uint32(rng.IntN(56))
						blob, chunks = digest("b"), seq(c, c+1+uint32(rng.IntN(8)))
					}
					var err error
					if last, err = s.Parents(id, blob, chunks, now()); err != nil {
						t.Error(err)
						return
					}
					lastBlob = blob
				case op < 12:
					_, _ = s.Announce(id, own, []uint32{0}, now())
				case op < 15:
					_, _ = s.Drop(id, own, []uint32{0}, now())
				case op < 16:
					_, _ = s.Announce(id, digest("b"), []uint32{uint32(rng.IntN(64))}, now())
				case op < 18:
					_ = s.Heartbeat(id, Load{ActiveUploads: rng.IntN(3)}, now())
				default:
					s.Expire(now())
					_ = s.Stats()
					_ = s.Peers(now())
					_ = s.Blobs()
					_ = s.OriginFetches(now())
				}
			}
		})
	}
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	pending := map[*peer]int{}
	perBlob := map[rafs.Digest]int{}
	for _, r := range s.peers {
		for _, l := range r.leases {
			pending[l.parent]++
			perBlob[l.blob]++
			found := false
			if b := s.blobs[l.blob]; b != nil {
				b.leased.near([]uint32{l.lo}, func(x *leaseRef) bool {
					found = found || (x.id == l.id && x.req == r)
					return !found
				})
			}
			if !found {
				t.Errorf("lease %d of %s not in its blob's index", l.id, r.id)
			}
		}
	}
	fetching := map[*peer]int{}
	for d, b := range s.blobs {
		if len(b.holders) == 0 && len(b.origin) == 0 && b.leased.len() == 0 {
			t.Errorf("empty blob %x kept", d[:4])
		}
		if b.leased.len() != perBlob[d] {
			t.Errorf("blob %x indexes %d leases, peers hold %d", d[:4], b.leased.len(), perBlob[d])
		}
		for _, f := range b.origin {
			for _, tu := range f.turns {
				fetching[tu.p]++
			}
		}
	}
	for _, p := range s.peers {
		h := s.hotOf(p)
		if p.pending != pending[p] || int(h.pending.Load()) != p.pending {
			t.Errorf("%s: pending %d (hot %d), leases name it %d times", p.id, p.pending, h.pending.Load(), pending[p])
		}
		if q := s.quality(p); h.quality() != q {
			t.Errorf("%s: hot quality %v, want %v", p.id, h.quality(), q)
		}
		if p.fetching != fetching[p] {
			t.Errorf("%s: fetching %d, holds %d turns", p.id, p.fetching, fetching[p])
		}
		n := 0
		for _, ws := range p.waits {
			n += len(ws)
		}
		if n != p.nwaits {
			t.Errorf("%s: %d waits, counted %d", p.id, n, p.nwaits)
		}
	}
}
