package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"damselfly/rafs"
	"damselfly/rafs/route"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// Route asks blob's scheduler where to get chunks, and on failure the
// next live scheduler in Pick order. With none answering within
// RouteTimeout (or before ctx is done) it returns an error wrapping
// route.ErrNoRoute. chunks may be in any order; the answer's lists are
// ascending. bytes is their stored size in all (0: not known), which
// the scheduler bounds origin turns by; a scheduler that does not know
// the field (an older one) is asked without it from then on.
func (c *Client) Route(ctx context.Context, blob rafs.Digest, chunks []uint32, bytes uint64) (route.Route, error) {
	if len(chunks) > wire.MaxOrdinals {
		return route.Route{}, fmt.Errorf("route %s: %d chunks, more than %d", blob, len(chunks), wire.MaxOrdinals)
	}
	asked := normalize(chunks)
	if len(asked) == 0 {
		return route.Route{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RouteTimeout)
	defer cancel()

	c.mu.Lock()
	order := pickOrder(blob, c.liveLocked())
	sessions := make([]uint64, len(order))
	for i, name := range order {
		sessions[i] = c.byName[name].session
	}
	c.mu.Unlock()
	var errs []error
	for i, name := range order {
		deadline, _ := ctx.Deadline()
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		// Share what is left among the schedulers still to try, so a
		// silent owner does not use up the whole budget.
		actx, acancel := context.WithTimeout(ctx, left/time.Duration(len(order)-i))
		r := c.byName[name]
		resp, err := c.call(actx, r, &wire.Route{Blob: blob, Chunks: asked, Bytes: c.sized(r, bytes)})
		if bytes != 0 && c.refusedSize(r, err) {
			resp, err = c.call(actx, r, &wire.Route{Blob: blob, Chunks: asked})
		}
		acancel()
		if err == nil {
			a, ok := resp.(*wire.Answer)
			if !ok {
				err = fmt.Errorf("route from scheduler %s: got a %s response, want answer", name, resp.Type())
			} else {
				return toRoute(a.Answer), nil
			}
		}
		if codeOf(err) == wire.CodeUnknownPeer {
			c.needRegister(r, sessions[i])
		}
		errs = append(errs, err)
		if ctx.Err() != nil || codeOf(err) == wire.CodeRateLimited {
			// A scheduler that is busy, not down, still owns the blob:
			// another would answer without its holdings and turns.
			break
		}
	}
	if len(order) == 0 {
		errs = append(errs, errors.New("no live scheduler"))
	}
	return route.Route{}, fmt.Errorf("route %s: %w: %w", blob, route.ErrNoRoute, errors.Join(errs...))
}

// RouteWait is Route, held by blob's scheduler while its whole answer
// would be to wait, for up to maxWait (see wire.RouteWait). A scheduler
// that does not know the request (an older one) is not asked for held
// routes again: the client then waits maxWait itself and routes. When
// the owner fails otherwise, it routes at once, which tries the other
// schedulers.
func (c *Client) RouteWait(ctx context.Context, blob rafs.Digest, chunks []uint32, bytes uint64, maxWait time.Duration) (route.Route, error) {
	asked := normalize(chunks)
	if len(asked) == 0 || len(chunks) > wire.MaxOrdinals {
		return c.Route(ctx, blob, chunks, bytes)
	}
	c.mu.Lock()
	var r *remote
	var session uint64
	if order := pickOrder(blob, c.liveLocked()); len(order) > 0 {
		r = c.byName[order[0]]
		session = r.session
	}
	hold := r != nil && !r.noHold
	c.mu.Unlock()
	if !hold {
		t := time.NewTimer(maxWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return route.Route{}, fmt.Errorf("route %s: %w: %w", blob, route.ErrNoRoute, ctx.Err())
		case <-t.C:
		}
		return c.Route(ctx, blob, chunks, bytes)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RouteTimeout+maxWait)
	resp, err := c.call(actx, r, &wire.RouteWait{Blob: blob, Chunks: asked, MaxWait: maxWait, Bytes: c.sized(r, bytes)})
	if bytes != 0 && c.refusedSize(r, err) {
		resp, err = c.call(actx, r, &wire.RouteWait{Blob: blob, Chunks: asked, MaxWait: maxWait})
	}
	cancel()
	if err == nil {
		if a, ok := resp.(*wire.Answer); ok {
			return toRoute(a.Answer), nil
		}
		err = fmt.Errorf("route wait from scheduler %s: got a %s response, want answer", r.name, resp.Type())
	}
	var e *wire.Error
	switch {
	case errors.As(err, &e) && e.Code == wire.CodeBadRequest && strings.Contains(e.Message, "unknown message type"):
		c.mu.Lock()
		r.noHold = true
		c.mu.Unlock()
		c.log.Info("scheduler does not hold routes; polling it", "scheduler", r.name)
	case codeOf(err) == wire.CodeUnknownPeer:
		c.needRegister(r, session)
	}
	if ctx.Err() != nil {
		return route.Route{}, fmt.Errorf("route %s: %w: %w", blob, route.ErrNoRoute, err)
	}
	return c.Route(ctx, blob, chunks, bytes)
}

// sized is the size a route query to r carries: bytes, or 0 (left out)
// once r refused the field.
func (c *Client) sized(r *remote, bytes uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.unsized {
		return 0
	}
	return bytes
}

// refusedSize reports whether err is r refusing a route query's size, as
// a scheduler that predates the field does (bytes after the body), and
// if so stops sending r the field.
func (c *Client) refusedSize(r *remote, err error) bool {
	var e *wire.Error
	if !errors.As(err, &e) || e.Code != wire.CodeBadRequest || !strings.Contains(e.Message, "after the body") {
		return false
	}
	c.mu.Lock()
	first := !r.unsized
	r.unsized = true
	c.mu.Unlock()
	if first {
		c.log.Info("scheduler does not take route sizes; asking without them", "scheduler", r.name)
	}
	return true
}

// toRoute converts the scheduler's answer. A parent whose ID or addresses
// do not parse is left out and its chunks are to be asked about again.
func toRoute(a scheduler.Answer) route.Route {
	var rt route.Route
	for _, p := range a.Parents {
		id, err := lpeer.Decode(p.ID)
		if err != nil {
			rt.Wait = append(rt.Wait, route.Wait{Chunks: p.Chunks})
			continue
		}
		info := lpeer.AddrInfo{ID: id}
		for _, s := range p.Addrs {
			if m, err := ma.NewMultiaddr(s); err == nil {
				info.Addrs = append(info.Addrs, m)
			}
		}
		rt.Parents = append(rt.Parents, route.Parent{Info: info, Chunks: p.Chunks})
	}
	rt.Origin = a.Origin
	for _, w := range a.Wait {
		rt.Wait = append(rt.Wait, route.Wait{Chunks: w.Chunks, RetryAfter: w.RetryAfter})
	}
	return rt
}
