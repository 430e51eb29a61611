package fetch

import (
	"context"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// flight is one chunk being fetched, keyed in Engine.flights by the chunk's
// digest and digest algorithm, the read's source and its description of
// the chunk (flightKey), so that concurrent reads of a chunk that would
// fetch it alike wait for one fetch. Its
// result fields are written once, before ready is closed. A fetched chunk
// is ready once verified and done once kept (cached, recorded and
// announced); a failed one or a cache hit is both at once. It stays in
// Engine.flights until done, so that a read coming meanwhile joins it
// rather than fetching the chunk again.
type flight struct {
	key   flightKey
	want  rafs.Chunk // as the leading read asked for it
	b     *batch
	ready chan struct{}
	done  chan struct{}

	finished  bool // ready closed; guarded by Engine.mu
	kept      bool // done closed; guarded by Engine.mu
	got       rafs.Chunk
	stored    []byte
	err       error
	transient bool
}

// batch is the fetch that a read started for the flights it leads. It is
// cancelled when no read waits for any of its flights any more.
type batch struct {
	refs    int       // waiters over all its flights; guarded by Engine.mu
	flights []*flight // those it leads
	cancel  context.CancelFunc
}

// join returns a flight for each chunk of cs, joining the flights in
// progress for their keys (the chunk's digest and algorithm, up's source,
// blob and the chunk's description) and starting one fetch for the rest.
// Every flight returned holds a reference that leave releases.
func (e *Engine) join(up registry.Ref, blob, atOrigin rafs.Digest, cs []rafs.Chunk) []*flight {
	ctx, cancel := context.WithCancel(e.life)
	b := &batch{cancel: cancel}
	out := make([]*flight, len(cs))
	var lead []*flight
	src := sourceOf(up)
	e.mu.Lock()
	closed := e.closed
	for i, c := range cs {
		k := flightKeyOf(blob, c, src)
		f := e.flights[k]
		switch {
		case f == nil || closed:
			f = &flight{key: k, want: c, b: b, ready: make(chan struct{}), done: make(chan struct{})}
			if !closed {
				e.flights[k] = f
			}
			lead = append(lead, f)
		case f.b != b:
			e.m.collapsed.Add(1)
		}
		f.b.refs++
		out[i] = f
	}
	b.flights = lead
	if len(lead) > 0 && !closed {
		e.wg.Add(1)
	}
	e.mu.Unlock()
	switch {
	case len(lead) == 0:
		cancel()
	case closed:
		cancel()
		for _, f := range lead {
			e.finish(f, rafs.Chunk{}, nil, ErrClosed, false)
		}
	default:
		go func() {
			defer e.wg.Done()
			defer cancel()
			e.fetch(ctx, up, blob, atOrigin, lead)
		}()
	}
	return out
}

// leave releases the references join returned, cancelling each batch that
// no read waits for any more. A cancelled batch's unfinished flights leave
// the map at once, so that a read coming later starts a fetch of its own
// instead of joining one that is ending; a flight that has its bytes stays
// until they are kept, so that a read coming while they are being cached
// takes them instead of fetching the chunk again.
func (e *Engine) leave(fs []*flight) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range fs {
		f.b.refs--
		if f.b.refs > 0 {
			continue
		}
		f.b.cancel()
		for _, g := range f.b.flights {
			if e.flights[g.key] == g && !g.finished {
				delete(e.flights, g.key)
			}
		}
	}
}

// finish records f's result, makes it ready and done, and wakes its
// waiters. Only the first result counts: finishing a flight that is ready
// only makes it done.
func (e *Engine) finish(f *flight, got rafs.Chunk, stored []byte, err error, transient bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.readyLocked(f, got, stored, err, transient)
	e.keptLocked(f)
}

// ready records f's verified bytes and wakes the waiters that can use
// them before they are kept; kept must follow. Only the first result
// counts.
func (e *Engine) ready(f *flight, got rafs.Chunk, stored []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.readyLocked(f, got, stored, nil, false)
}

// kept makes a ready flight done.
func (e *Engine) kept(f *flight) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keptLocked(f)
}

func (e *Engine) readyLocked(f *flight, got rafs.Chunk, stored []byte, err error, transient bool) {
	if f.finished {
		return
	}
	f.finished = true
	f.got, f.stored, f.err, f.transient = got, stored, err, transient
	close(f.ready)
}

func (e *Engine) keptLocked(f *flight) {
	if f.kept {
		return
	}
	f.kept = true
	if e.flights[f.key] == f {
		delete(e.flights, f.key)
	}
	close(f.done)
}
