package fusemount

import (
	"context"
	"sync"
)

// flightGroup tracks the chunk fetches in flight, one flight per chunk,
// so that concurrent misses of a chunk cause one fetch. A fetch is a run:
// one backend request for a chunk a reader wants (its head) and the
// chunks after it; each chunk's flight completes as soon as that chunk
// is delivered, so the head's reader does not wait for the tail. A run
// works under its own context. Until its head has arrived it is
// cancelled when every caller waiting on one of its flights has given
// up; after that it goes on in the background (filling memory and the
// node cache) whether anyone waits or not.
type flightGroup struct {
	mu    sync.Mutex
	calls map[uint32]*flight
}

// flight is the fetch of one chunk, a part of a run. val, src and err are
// set before done is closed, by the run's goroutine only.
type flight struct {
	key  uint32
	run  *run
	done chan struct{}
	val  []byte
	src  string
	err  error
}

// run is one fetch covering one or more chunks. Its fields are guarded
// by the group's mutex.
type run struct {
	flights   []*flight // head first, in run order
	waiters   int       // callers waiting on any of its flights
	detached  bool      // the head arrived: no longer cancelled by callers leaving
	abandoned bool      // cancelled by the last caller leaving; its flights dropped
	cancel    context.CancelFunc
}

// start returns the flight of key, joining the one in flight if there is
// one. Otherwise it registers a new run with key as its head, and
// returns leader true and the run's context, derived from parent: the
// caller must then fetch the run and complete every one of its flights.
// The caller counts as waiting on the run from here, so that the run is
// not abandoned between its start and its wait: it must then call wait,
// or leave.
func (g *flightGroup) start(parent context.Context, key uint32) (fl *flight, ctx context.Context, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = map[uint32]*flight{}
	}
	if fl, ok := g.calls[key]; ok {
		fl.run.waiters++
		return fl, nil, false
	}
	ctx, cancel := context.WithCancel(parent)
	r := &run{cancel: cancel, waiters: 1}
	fl = &flight{key: key, run: r, done: make(chan struct{})}
	r.flights = []*flight{fl}
	g.calls[key] = fl
	return fl, ctx, true
}

// extend adds flights for keys to r, in order, stopping at the first key
// already in flight (or if r was abandoned). It returns all of r's
// flights, head first.
func (g *flightGroup) extend(r *run, keys []uint32) []*flight {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.abandoned {
		return r.flights
	}
	for _, k := range keys {
		if _, ok := g.calls[k]; ok {
			break
		}
		fl := &flight{key: k, run: r, done: make(chan struct{})}
		r.flights = append(r.flights, fl)
		g.calls[k] = fl
	}
	return r.flights
}

// complete ends fl with its result; later callers of its key start a new
// flight. Each flight is completed exactly once.
func (g *flightGroup) complete(fl *flight, val []byte, src string, err error) {
	g.mu.Lock()
	if g.calls[fl.key] == fl {
		delete(g.calls, fl.key)
	}
	if err == nil && fl == fl.run.flights[0] {
		fl.run.detached = true
	}
	g.mu.Unlock()
	fl.val, fl.src, fl.err = val, src, err
	close(fl.done)
}

// leave ends the caller's interest in fl's run without waiting (the
// caller got its result another way, or never wanted it). It does not
// cancel the run.
func (g *flightGroup) leave(fl *flight) {
	g.mu.Lock()
	fl.run.waiters--
	g.mu.Unlock()
}

// wait returns fl's result, or ctx's error when ctx ends first; the
// caller is one start counted. The last caller to give up on a run whose
// head has not arrived cancels it and drops its flights, so the next
// caller starts afresh rather than join a cancelled fetch.
func (g *flightGroup) wait(ctx context.Context, fl *flight) ([]byte, string, error) {
	r := fl.run
	select {
	case <-fl.done:
		g.mu.Lock()
		r.waiters--
		g.mu.Unlock()
		return fl.val, fl.src, fl.err
	case <-ctx.Done():
		g.mu.Lock()
		r.waiters--
		if r.waiters == 0 && !r.detached {
			r.abandoned = true
			r.cancel()
			for _, f := range r.flights {
				if g.calls[f.key] == f {
					delete(g.calls, f.key)
				}
			}
		}
		g.mu.Unlock()
		return nil, "", ctx.Err()
	}
}

// busy reports whether a fetch of key is in flight.
func (g *flightGroup) busy(key uint32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.calls[key]
	return ok
}
