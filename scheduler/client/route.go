package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	dpeer "damselfly/peer"
	"damselfly/rafs"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// Route asks blob's scheduler where to get chunks, and on failure the
// next live scheduler in Pick order. With none answering within
// RouteTimeout (or before ctx is done) it returns an error wrapping
// peer.ErrNoRoute. chunks may be in any order; the answer's lists are
// ascending.
func (c *Client) Route(ctx context.Context, blob rafs.Digest, chunks []uint32) (dpeer.Route, error) {
	if len(chunks) > wire.MaxOrdinals {
		return dpeer.Route{}, fmt.Errorf("route %s: %d chunks, more than %d", blob, len(chunks), wire.MaxOrdinals)
	}
	asked := normalize(chunks)
	if len(asked) == 0 {
		return dpeer.Route{}, nil
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
		resp, err := c.call(actx, r, &wire.Route{Blob: blob, Chunks: asked})
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
		if ctx.Err() != nil {
			break
		}
	}
	if len(order) == 0 {
		errs = append(errs, errors.New("no live scheduler"))
	}
	return dpeer.Route{}, fmt.Errorf("route %s: %w: %w", blob, dpeer.ErrNoRoute, errors.Join(errs...))
}

// toRoute converts the scheduler's answer. A parent whose ID or addresses
// do not parse is left out and its chunks are to be asked about again.
func toRoute(a scheduler.Answer) dpeer.Route {
	var rt dpeer.Route
	for _, p := range a.Parents {
		id, err := lpeer.Decode(p.ID)
		if err != nil {
			rt.Wait = append(rt.Wait, dpeer.Wait{Chunks: p.Chunks})
			continue
		}
		info := lpeer.AddrInfo{ID: id}
		for _, s := range p.Addrs {
			if m, err := ma.NewMultiaddr(s); err == nil {
				info.Addrs = append(info.Addrs, m)
			}
		}
		rt.Parents = append(rt.Parents, dpeer.Parent{Info: info, Chunks: p.Chunks})
	}
	rt.Origin = a.Origin
	for _, w := range a.Wait {
		rt.Wait = append(rt.Wait, dpeer.Wait{Chunks: w.Chunks, RetryAfter: w.RetryAfter})
	}
	return rt
}
