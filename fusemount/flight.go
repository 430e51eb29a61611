package fusemount

import (
	"context"
	"sync"
)

// flightGroup collapses concurrent fetches of one chunk into one. The
// shared fetch runs under its own context, cancelled only when every
// waiter has gone, so one reader giving up does not fail the others.
type flightGroup struct {
	mu    sync.Mutex
	calls map[uint32]*flight
}

type flight struct {
	done    chan struct{}
	val     []byte
	err     error
	waiters int
	cancel  context.CancelFunc
}

// do runs fn once for key while any caller waits for it and returns its
// result to every caller. fn's context is detached from the callers' and
// cancelled when the last of them leaves.
func (g *flightGroup) do(ctx context.Context, key uint32, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[uint32]*flight{}
	}
	c, ok := g.calls[key]
	if !ok {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &flight{done: make(chan struct{}), cancel: cancel}
		g.calls[key] = c
		go func() {
			c.val, c.err = fn(fctx)
			g.mu.Lock()
			if g.calls[key] == c {
				delete(g.calls, key)
			}
			g.mu.Unlock()
			cancel()
			close(c.done)
		}()
	}
	c.waiters++
	g.mu.Unlock()

	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		g.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// Abandoned: cancel it, and let the next caller start afresh
			// rather than join a cancelled fetch.
			c.cancel()
			if g.calls[key] == c {
				delete(g.calls, key)
			}
		}
		g.mu.Unlock()
		return nil, ctx.Err()
	}
}

// busy reports whether a fetch of key is in flight.
func (g *flightGroup) busy(key uint32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.calls[key]
	return ok
}
