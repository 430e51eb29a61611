package client

import (
	"context"
	"slices"
	"time"

	"damselfly/rafs"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// flushLoop delivers queued messages when woken, and retries undelivered
// holdings every HeartbeatInterval, until ctx is done.
func (c *Client) flushLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		}
		c.flush(ctx)
	}
}

// flush makes one pass over the dirty blobs and the queued operations.
// A scheduler that fails is skipped for the rest of the pass.
func (c *Client) flush(ctx context.Context) {
	failed := map[string]bool{}
	c.mu.Lock()
	blobs := make([]rafs.Digest, 0, len(c.dirty))
	for b := range c.dirty {
		blobs = append(blobs, b)
	}
	c.mu.Unlock()
	for _, blob := range blobs {
		if ctx.Err() != nil {
			return
		}
		c.deliver(ctx, blob, failed)
	}
	c.mu.Lock()
	ops := c.ops
	c.ops = nil
	c.mu.Unlock()
	var again []op
	for i, o := range ops {
		if ctx.Err() != nil {
			again = append(again, ops[i:]...)
			break
		}
		r, session := c.ownerOf(o.blob)
		if r == nil || failed[r.name] {
			again = append(again, o) // no owner to take it now; QueueSize bounds these
			continue
		}
		if _, err := c.callTimeout(ctx, r, o.msg); err != nil {
			c.log.Debug("scheduler message not delivered", "type", o.msg.Type(), "blob", o.blob, "err", err)
			c.onError(r, session, err, failed)
			if o.tries++; o.tries < maxTries && codeOf(err) == 0 {
				again = append(again, o)
			}
		}
	}
	if len(again) > 0 {
		c.mu.Lock()
		c.ops = append(again, c.ops...)
		if n := len(c.ops) - c.cfg.QueueSize; n > 0 {
			c.ops = c.ops[n:]
		}
		c.mu.Unlock()
	}
}

// ownerOf returns the live, registered scheduler that owns blob and its
// session, or nil.
func (c *Client) ownerOf(blob rafs.Digest) (*remote, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.byName[scheduler.Pick(blob, c.liveLocked())]
	if r == nil || !r.registered {
		return nil, 0
	}
	return r, r.session
}

// retryable reports whether a failed delivery is worth repeating: not
// when the scheduler refused it for good (banned, over the holdings
// limit, a bad request). The blob is then announced in full with its next
// change or the next registration.
func retryable(err error) bool {
	switch codeOf(err) {
	case wire.CodeBanned, wire.CodeLimit, wire.CodeBadRequest:
		return false
	}
	return true
}

func (c *Client) onError(r *remote, session uint64, err error, failed map[string]bool) {
	switch codeOf(err) {
	case wire.CodeUnknownPeer:
		c.needRegister(r, session)
		failed[r.name] = true
	case 0: // no answer
		failed[r.name] = true
	}
}

// deliver sends what blob's owner has yet to hear: everything, as an
// AnnounceFull, if it is not the scheduler that heard last; else the
// drops and adds since. On failure the blob stays dirty, for a full
// announcement on the next pass.
func (c *Client) deliver(ctx context.Context, blob rafs.Digest, failed map[string]bool) {
	c.mu.Lock()
	h := c.blobs[blob]
	if h == nil {
		delete(c.dirty, blob)
		c.mu.Unlock()
		return
	}
	r := c.byName[scheduler.Pick(blob, c.liveLocked())]
	if r == nil || !r.registered || failed[r.name] {
		c.mu.Unlock()
		return // stays dirty until an owner can take it
	}
	var msgs []wire.Message
	if h.sentTo == r.name && h.add.Count() <= wire.MaxOrdinals && h.drop.Count() <= wire.MaxOrdinals {
		if d := h.drop.Ordinals(nil); len(d) > 0 {
			msgs = append(msgs, &wire.Drop{Blob: blob, Chunks: d})
		}
		if a := h.add.Ordinals(nil); len(a) > 0 {
			msgs = append(msgs, &wire.Announce{Blob: blob, Chunks: a})
		}
	} else {
		// A new owner, or changes too many for one message.
		msgs = append(msgs, &wire.AnnounceFull{Blob: blob, Held: slices.Clone(h.held)})
	}
	// The scheduler that had the blob before, if it is still up, is told
	// to forget it once the new owner has it, so that it holds nothing
	// stale if the blob comes back to it.
	var prev *remote
	var prevSession uint64
	if p := c.byName[h.sentTo]; p != nil && p != r && p.alive && p.registered {
		prev, prevSession = p, p.session
	}
	h.add, h.drop = nil, nil
	delete(c.dirty, blob)
	h.sentTo = ""
	session := r.session
	c.mu.Unlock()

	var err error
	for _, m := range msgs {
		if _, err = c.callTimeout(ctx, r, m); err != nil {
			break
		}
	}
	if err != nil {
		if retryable(err) {
			c.mu.Lock()
			c.dirty[blob] = struct{}{} // sentTo is "": all of it again
			c.mu.Unlock()
		}
		c.log.Debug("announcement not delivered", "blob", blob, "scheduler", r.name, "err", err)
		c.onError(r, session, err, failed)
		return
	}
	if prev != nil && !failed[prev.name] {
		if _, err := c.callTimeout(ctx, prev, &wire.AnnounceFull{Blob: blob}); err != nil {
			c.log.Debug("handing blob over: old scheduler not told", "blob", blob, "scheduler", prev.name, "err", err)
			c.onError(prev, prevSession, err, failed)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.session != session || !r.registered {
		return // it started a new session meanwhile, which registered() marked us dirty for
	}
	h.sentTo = r.name
	if _, again := c.dirty[blob]; !again && h.held.Count() == 0 && c.blobs[blob] == h {
		delete(c.blobs, blob)
	}
}
