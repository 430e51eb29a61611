package client

import (
	"context"
	"sync"
	"time"

	"damselfly/scheduler/wire"
)

// runRemote keeps this peer's session with r until ctx is done: register,
// then heartbeat every HeartbeatInterval; register again whenever r says
// it does not know the peer or comes back after being taken as dead.
func (c *Client) runRemote(ctx context.Context, r *remote) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		c.step(ctx, r)
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(c.cfg.HeartbeatInterval)
	}
}

// step is one round with r: a registration if it needs one, else a
// heartbeat (and a registration at once if the heartbeat says so).
func (c *Client) step(ctx context.Context, r *remote) {
	c.mu.Lock()
	registered := r.registered
	c.mu.Unlock()
	if registered {
		_, err := c.callTimeout(ctx, r, &wire.Heartbeat{Load: c.currentLoad()})
		switch {
		case err == nil:
			c.mu.Lock()
			r.failures = 0
			c.mu.Unlock()
			return
		case codeOf(err) == wire.CodeRateLimited:
			// Busy, not down (call waited it out as long as it could):
			// its blobs stay where they are.
			return
		case codeOf(err) == wire.CodeUnknownPeer:
			// It restarted, or we were silent past its TTL.
			c.log.Info("scheduler forgot this peer; registering again", "scheduler", r.name)
			c.mu.Lock()
			r.registered = false // nothing goes to it until it has a session
			c.mu.Unlock()
		default:
			c.failed(ctx, r, err)
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	addrs := c.h.Addrs()
	reg := &wire.Register{Labels: c.cfg.Labels, UploadCapacity: c.cfg.UploadCapacity}
	for _, a := range addrs[:min(len(addrs), wire.MaxAddrs)] {
		reg.Addrs = append(reg.Addrs, a.String())
	}
	if _, err := c.callTimeout(ctx, r, reg); err != nil {
		if codeOf(err) == wire.CodeTooManyPeers {
			// It has all the members it takes: to this peer it is as
			// good as down (its blobs go to the others once it is
			// taken as dead), and registering is tried again each
			// round, for a member's place frees when one leaves.
			c.log.Warn("scheduler refuses new members (max_peers); trying again later", "scheduler", r.name)
		}
		if codeOf(err) != wire.CodeRateLimited {
			c.failed(ctx, r, err)
		}
		return
	}
	c.registered(r)
}

// registered records a new session with r: r is live, holds nothing of
// ours, and gets every blob it owns announced in full.
func (c *Client) registered(r *remote) {
	c.mu.Lock()
	wasAlive := r.alive
	r.alive, r.registered, r.failures = true, true, 0
	r.session++
	for blob, h := range c.blobs {
		if h.sentTo == r.name {
			h.sentTo = ""
		}
		c.dirty[blob] = struct{}{} // ownership may have moved back to r
	}
	c.mu.Unlock()
	if !wasAlive {
		c.log.Info("scheduler is back", "scheduler", r.name)
	} else {
		c.log.Debug("registered with scheduler", "scheduler", r.name)
	}
	c.signal()
}

// failed counts a failed round with r, and takes r as dead after
// DeadAfter in a row: its blobs then move to the other schedulers.
func (c *Client) failed(ctx context.Context, r *remote, err error) {
	if ctx.Err() != nil {
		return // shutting down, not a scheduler failure
	}
	c.mu.Lock()
	r.failures++
	died := r.alive && r.failures >= c.cfg.DeadAfter
	if died {
		r.alive = false
		for blob := range c.blobs {
			c.dirty[blob] = struct{}{}
		}
	}
	if !r.alive {
		// Whatever it held may be gone when it answers again.
		r.registered = false
	}
	c.mu.Unlock()
	if died {
		c.log.Warn("scheduler is down; moving its blobs to the others", "scheduler", r.name, "err", err)
		c.signal()
	} else {
		c.log.Debug("scheduler request failed", "scheduler", r.name, "err", err)
	}
}

// needRegister asks r's worker to register again now: r answered
// "unknown peer" to a request sent during session (r's registration count
// then). An answer to a request sent before the latest registration says
// nothing about that registration, and is ignored.
func (c *Client) needRegister(r *remote, session uint64) {
	c.mu.Lock()
	stale := r.session != session
	if !stale {
		r.registered = false
	}
	c.mu.Unlock()
	if stale {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// unregisterAll ends the sessions with every scheduler that has one, in
// parallel, bounded by RequestTimeout.
func (c *Client) unregisterAll() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range c.remotes {
		c.mu.Lock()
		reg := r.registered && r.alive
		r.registered = false
		c.mu.Unlock()
		if reg {
			wg.Go(func() { _, _ = c.callOK(ctx, r, &wire.Unregister{}) })
		}
	}
	wg.Wait()
}
