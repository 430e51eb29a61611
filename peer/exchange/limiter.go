package exchange

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// fairLimiter is a token bucket for upload bytes, shared by every stream,
// that hands tokens to waiting peers in turn: when the bucket is the
// bottleneck each requesting peer gets an equal share, however many streams
// it has open. Within one peer, waiters are served first come, first
// served. Every Wait asks for at most the bucket size, so turns are small
// and shares even out within a fraction of a second.
type fairLimiter struct {
	rate  float64 // bytes per second
	burst float64 // bucket size, bytes

	mu     sync.Mutex
	tokens float64
	last   time.Time
	queues map[peer.ID][]*waiter
	ring   []peer.ID // peers with waiters, in turn order
	next   int       // index into ring of the peer whose turn it is
	timer  *time.Timer
	closed bool
}

type waiter struct {
	n       float64
	ready   chan struct{} // closed when granted
	granted bool
}

// newFairLimiter returns a limiter of rate bytes/s with a bucket of burst
// bytes, or nil (no limit) when rate is 0. It starts full.
func newFairLimiter(rate int64, burst int) *fairLimiter {
	if rate <= 0 {
		return nil
	}
	return &fairLimiter{
		rate:   float64(rate),
		burst:  float64(burst),
		tokens: float64(burst),
		last:   time.Now(),
		queues: make(map[peer.ID][]*waiter),
	}
}

// Wait blocks until p may send n bytes (n <= the bucket size) or ctx is
// done. A nil limiter never blocks.
func (l *fairLimiter) Wait(ctx context.Context, p peer.ID, n int) error {
	if l == nil {
		return nil
	}
	w := &waiter{n: min(float64(n), l.burst), ready: make(chan struct{})}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return context.Canceled
	}
	l.refill(time.Now())
	if len(l.ring) == 0 && l.tokens >= w.n {
		l.tokens -= w.n
		l.mu.Unlock()
		return nil
	}
	if len(l.queues[p]) == 0 {
		l.ring = append(l.ring, p)
	}
	l.queues[p] = append(l.queues[p], w)
	l.dispatch()
	l.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		l.tokens = min(l.tokens+w.n, l.burst) // unused: give it back
	} else {
		l.remove(p, w)
	}
	l.dispatch()
	return ctx.Err()
}

// Close stops the limiter's timer. Waiters still queued wait for their
// contexts.
func (l *fairLimiter) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
}

func (l *fairLimiter) refill(now time.Time) {
	if d := now.Sub(l.last); d > 0 {
		l.tokens = min(l.tokens+d.Seconds()*l.rate, l.burst)
		l.last = now
	}
}

// dispatch grants tokens to queued waiters, one per peer in turn, while
// there are enough; then arms the timer for when the next waiter's tokens
// will have accrued. l.mu is held.
func (l *fairLimiter) dispatch() {
	l.refill(time.Now())
	for len(l.ring) > 0 {
		if l.next >= len(l.ring) {
			l.next = 0
		}
		p := l.ring[l.next]
		q := l.queues[p]
		w := q[0]
		if l.tokens < w.n {
			if !l.closed {
				d := time.Duration((w.n - l.tokens) / l.rate * float64(time.Second))
				if l.timer == nil {
					l.timer = time.AfterFunc(d, l.onTimer)
				} else {
					l.timer.Reset(d)
				}
			}
			return
		}
		l.tokens -= w.n
		w.granted = true
		close(w.ready)
		if len(q) == 1 {
			delete(l.queues, p)
			l.ring = append(l.ring[:l.next], l.ring[l.next+1:]...)
			// l.next now indexes the following peer.
		} else {
			q[0] = nil
			l.queues[p] = q[1:]
			l.next++
		}
	}
}

func (l *fairLimiter) onTimer() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.dispatch()
	}
}

// remove drops w, which has not been granted, from p's queue.
func (l *fairLimiter) remove(p peer.ID, w *waiter) {
	q := l.queues[p]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		break
	}
	if len(q) > 0 {
		l.queues[p] = q
		return
	}
	delete(l.queues, p)
	for i, x := range l.ring {
		if x == p {
			l.ring = append(l.ring[:i], l.ring[i+1:]...)
			if l.next > i {
				l.next--
			}
			break
		}
	}
}
