// Package flight collapses concurrent fetches of the same thing into one
// and cancels a fetch when nobody waits for it any more: the one
// "fetch once" group of the mount's read path (fusemount) and the peer's
// fetch engine (peer/fetch).
//
// A Group maps keys to flights. A Flight is the fetch of one key; a
// Batch is the flights started together by one Join (and added to it by
// Extend), fetched by one piece of work under one context. Every flight
// a caller gets from Join holds a reference on its batch; Leave (or
// Wait, which leaves) gives it back, and when the last reference to a
// batch goes, the batch is cancelled and its flights without a result
// leave the group, so that a later caller starts afresh rather than join
// a fetch that is ending. A batch that has Detach called goes on however
// many waiters leave (the mount detaches a run once its head arrived:
// its tail fills the cache in the background).
//
// A flight completes in two stages: Resolve makes its result available
// (Ready is closed), Settle ends it (Done is closed) and takes it out of
// the group. Between the two the flight stays in the group, so that a
// caller coming meanwhile joins it and gets the result rather than
// fetching again (the peer hands a verified chunk to its readers, then
// caches and announces it). A one-stage user calls Finish, which does
// both at once.
//
// Starting the work of a batch, and waiting for it on shutdown, is the
// user's: Group only says which keys a caller leads.
//
// A flight's value may own memory that goes back to a pool once nobody
// reads it (the peer's chunk buffers, package rafs/bufpool): with
// SetRelease, the Group calls a function on each value when its flight is
// settled and no caller holds a reference to it any more.
package flight

import (
	"context"
	"slices"
	"sync"
)

// Group is a set of flights by key. The zero Group is ready to use. Its
// methods are safe for concurrent use; none blocks but Wait.
type Group[K comparable, V any] struct {
	mu      sync.Mutex
	flights map[K]*Flight[K, V]
	closed  error // set by Close: Join starts nothing any more
	release func(V)
}

// Batch is the flights one Join started, fetched together under one
// context. Its fields are guarded by the group's mutex.
type Batch[K comparable, V any] struct {
	g         *Group[K, V]
	cancel    context.CancelFunc
	flights   []*Flight[K, V] // those it leads, in the order they were added
	refs      int             // references held by callers over all its flights
	detached  bool            // no longer cancelled by its callers leaving
	abandoned bool            // cancelled by the last caller leaving; Extend adds nothing
}

// Flight is the fetch of one key. Its result is written once, before
// Ready is closed.
type Flight[K comparable, V any] struct {
	key   K
	b     *Batch[K, V]
	ready chan struct{}
	done  chan struct{}

	resolved, settled bool // guarded by the group's mutex
	holders           int  // references callers hold on f itself; guarded too
	released          bool // the release function had f's value; guarded too
	val               V
	err               error
}

// SetRelease makes the group call fn with each flight's value once the
// flight is settled and every reference to it (Join's, given back by
// Leave) is given back: nobody reads the value after that, so fn may
// recycle what it owns. fn runs with the group's mutex held and must not
// call the group. A caller must read a value with Result while it holds
// its reference; Wait, which gives the reference back before it returns
// the value, must not be used on a group with a release function. Call
// SetRelease before the group is used.
func (g *Group[K, V]) SetRelease(fn func(V)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.release = fn
}

// releaseLocked hands f's value to the release function if f is settled
// and unheld, once. The caller holds the group's mutex.
func (g *Group[K, V]) releaseLocked(f *Flight[K, V]) {
	if g.release == nil || !f.settled || f.holders > 0 || f.released || !f.resolved {
		return
	}
	f.released = true
	g.release(f.val)
}

// Join returns a flight for each of keys, in order, each holding one
// reference on its batch that the caller gives back with Leave or Wait.
// A key in flight joins that flight; shared counts the keys that joined
// a flight another batch leads. The other keys get flights of a new
// batch, lead, with ctx derived from parent as its context: the caller
// must then fetch them and finish every one, and should call
// lead.Cancel when the work ends to free ctx. lead and ctx are nil when
// every key joined a flight.
//
// A key given twice gets the same flight twice, with two references.
// After Close, Join joins and starts nothing: every flight it returns is
// already finished with Close's error, and lead is nil.
func (g *Group[K, V]) Join(parent context.Context, keys ...K) (fs []*Flight[K, V], lead *Batch[K, V], ctx context.Context, shared int) {
	ctx, cancel := context.WithCancel(parent)
	b := &Batch[K, V]{g: g, cancel: cancel}
	fs = make([]*Flight[K, V], len(keys))
	g.mu.Lock()
	closed := g.closed
	for i, k := range keys {
		f := g.flights[k]
		switch {
		case f == nil || closed != nil:
			f = b.add(k)
		case f.b != b:
			shared++
		}
		f.b.refs++
		f.holders++
		fs[i] = f
	}
	if closed != nil {
		b.abandoned = true
		for _, f := range b.flights {
			g.resolveLocked(f, *new(V), closed)
			g.settleLocked(f)
		}
	}
	g.mu.Unlock()
	if closed != nil || len(b.flights) == 0 {
		cancel()
		return fs, nil, nil, shared
	}
	return fs, b, ctx, shared
}

// add makes a flight of k led by b and, unless the group is closed, puts
// it in the group. The caller holds the group's mutex.
func (b *Batch[K, V]) add(k K) *Flight[K, V] {
	f := &Flight[K, V]{key: k, b: b, ready: make(chan struct{}), done: make(chan struct{})}
	b.flights = append(b.flights, f)
	if b.g.closed == nil {
		if b.g.flights == nil {
			b.g.flights = make(map[K]*Flight[K, V])
		}
		b.g.flights[k] = f
	}
	return f
}

// Extend adds flights of keys to b, in order, stopping at the first key
// already in flight (the mount grows a run over the chunks after its
// head only while nobody else fetches them), and adds nothing to a batch
// that was abandoned or a closed group. It returns all of b's flights,
// in order; the new ones hold no reference (their waiters join them).
func (g *Group[K, V]) Extend(b *Batch[K, V], keys ...K) []*Flight[K, V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !b.abandoned && g.closed == nil {
		for _, k := range keys {
			if _, ok := g.flights[k]; ok {
				break
			}
			b.add(k)
		}
	}
	return slices.Clone(b.flights)
}

// Leave gives back the references of fs (from Join), without waiting.
// A batch left with no reference and not detached is cancelled, and its
// flights without a result leave the group at once, so that a later
// caller starts a fetch of its own rather than join one that is ending;
// a flight that has its result stays until it is settled, so that a
// caller coming meanwhile takes the result.
func (g *Group[K, V]) Leave(fs ...*Flight[K, V]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range fs {
		f.holders--
		g.releaseLocked(f)
		b := f.b
		b.refs--
		if b.refs > 0 || b.detached || b.abandoned {
			continue
		}
		b.abandoned = true
		b.cancel()
		for _, o := range b.flights {
			if g.flights[o.key] == o && !o.resolved {
				delete(g.flights, o.key)
			}
		}
	}
}

// Wait returns f's result once it is ready, or ctx's error if ctx ends
// first; either way it gives back the caller's reference to f (Leave),
// so the last caller to give up on a batch cancels it. Not for a group
// with a release function (SetRelease): the value may be released by the
// time Wait returns it.
func (g *Group[K, V]) Wait(ctx context.Context, f *Flight[K, V]) (V, error) {
	defer g.Leave(f)
	select {
	case <-f.ready:
		return f.val, f.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// Resolve records f's result and closes Ready, waking the callers that
// can use it before the flight is settled. Only the first result counts.
func (g *Group[K, V]) Resolve(f *Flight[K, V], v V, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolveLocked(f, v, err)
}

// Settle ends a resolved flight: it leaves the group, so that a later
// caller of its key starts a new flight, and Done is closed. Settling it
// again does nothing; settling a flight that has no result panics, as
// its waiters would have nothing to read.
func (g *Group[K, V]) Settle(f *Flight[K, V]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !f.resolved {
		panic("flight: Settle before Resolve")
	}
	g.settleLocked(f)
}

// Finish is Resolve then Settle, at once: for a result that is final
// when it is known (an error, a cache hit, a one-stage user). Finishing
// a resolved flight only settles it.
func (g *Group[K, V]) Finish(f *Flight[K, V], v V, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resolveLocked(f, v, err)
	g.settleLocked(f)
}

// resolveLocked records f's first result; a later one is dropped, and
// never released: its caller may still be using it.
func (g *Group[K, V]) resolveLocked(f *Flight[K, V], v V, err error) {
	if f.resolved {
		return
	}
	f.resolved = true
	f.val, f.err = v, err
	close(f.ready)
}

func (g *Group[K, V]) settleLocked(f *Flight[K, V]) {
	if f.settled {
		return
	}
	f.settled = true
	if g.flights[f.key] == f {
		delete(g.flights, f.key)
	}
	close(f.done)
	g.releaseLocked(f)
}

// Busy reports whether a flight of k is in the group.
func (g *Group[K, V]) Busy(k K) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.flights[k]
	return ok
}

// Waiters returns how many references callers hold on the batch of k's
// flight, 0 if k is not in flight: a test's way to see that a caller has
// joined.
func (g *Group[K, V]) Waiters(k K) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[k]; ok {
		return f.b.refs
	}
	return 0
}

// Close makes every later Join fail at once with err, which must not be
// nil, so that a closed user starts no fetch. Flights in progress are
// left to their work, which the user cancels and waits for.
func (g *Group[K, V]) Close(err error) {
	if err == nil {
		panic("flight: Close with a nil error")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = err
}

// Cancel cancels b's context (the work's own end, or a shutdown); it
// does not take b's flights out of the group, so the work must still
// finish them. It may be called more than once.
func (b *Batch[K, V]) Cancel() { b.cancel() }

// Detach keeps b going when its last caller leaves. Call it before
// finishing the flight whose arrival makes the rest worth fetching
// anyway, so that the callers that flight wakes cannot cancel b first.
func (b *Batch[K, V]) Detach() {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	b.detached = true
}

// Flights returns the flights b leads, in the order they were added.
func (b *Batch[K, V]) Flights() []*Flight[K, V] {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	return slices.Clone(b.flights)
}

// Key returns f's key.
func (f *Flight[K, V]) Key() K { return f.key }

// Batch returns the batch that leads f.
func (f *Flight[K, V]) Batch() *Batch[K, V] { return f.b }

// Ready is closed once f's result is available (Result).
func (f *Flight[K, V]) Ready() <-chan struct{} { return f.ready }

// Done is closed once f is settled: its result is final and it has left
// the group.
func (f *Flight[K, V]) Done() <-chan struct{} { return f.done }

// Result returns f's value and error; only after Ready is closed.
func (f *Flight[K, V]) Result() (V, error) { return f.val, f.err }

// Resolved reports whether f's result is available, without waiting.
func (f *Flight[K, V]) Resolved() bool {
	select {
	case <-f.ready:
		return true
	default:
		return false
	}
}

// Settled reports whether f is settled, without waiting.
func (f *Flight[K, V]) Settled() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}
