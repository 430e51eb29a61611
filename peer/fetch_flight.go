package peer

import (
	"context"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// flight is one chunk being fetched, keyed in Node.flights by the chunk's
// digest and digest algorithm, the read's source and its description of
// the chunk (flightKey), so that concurrent reads of a chunk that would
// fetch it alike wait for one fetch. Its
// result fields are written once, before ready is closed. A fetched chunk
// is ready once verified and done once kept (cached, recorded and
// announced); a failed one or a cache hit is both at once. It stays in
// Node.flights until done, so that a read coming meanwhile joins it
// rather than fetching the chunk again.
type flight struct {
	key   flightKey
	want  rafs.Chunk // as the leading read asked for it
	b     *batch
	ready chan struct{}
	done  chan struct{}

	finished  bool // ready closed; guarded by Node.mu
	kept      bool // done closed; guarded by Node.mu
	got       rafs.Chunk
	stored    []byte
	err       error
	transient bool
}

// batch is the fetch that a read started for the flights it leads. It is
// cancelled when no read waits for any of its flights any more.
type batch struct {
	refs    int       // waiters over all its flights; guarded by Node.mu
	flights []*flight // those it leads
	cancel  context.CancelFunc
}

// join returns a flight for each chunk of cs, joining the flights in
// progress for their keys (the chunk's digest and algorithm, up's source,
// blob and the chunk's description) and starting one fetch for the rest.
// Every flight returned holds a reference that leave releases.
func (n *Node) join(up registry.Ref, blob rafs.Digest, cs []rafs.Chunk) []*flight {
	ctx, cancel := context.WithCancel(n.life)
	b := &batch{cancel: cancel}
	out := make([]*flight, len(cs))
	var lead []*flight
	src := sourceOf(up)
	n.mu.Lock()
	closed := n.closed
	for i, c := range cs {
		k := flightKeyOf(blob, c, src)
		f := n.flights[k]
		switch {
		case f == nil || closed:
			f = &flight{key: k, want: c, b: b, ready: make(chan struct{}), done: make(chan struct{})}
			if !closed {
				n.flights[k] = f
			}
			lead = append(lead, f)
		case f.b != b:
			n.m.collapsed.Add(1)
		}
		f.b.refs++
		out[i] = f
	}
	b.flights = lead
	if len(lead) > 0 && !closed {
		n.wg.Add(1)
	}
	n.mu.Unlock()
	switch {
	case len(lead) == 0:
		cancel()
	case closed:
		cancel()
		for _, f := range lead {
			n.finish(f, rafs.Chunk{}, nil, ErrClosed, false)
		}
	default:
		go func() {
			defer n.wg.Done()
			defer cancel()
			n.fetch(ctx, up, blob, lead)
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
func (n *Node) leave(fs []*flight) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range fs {
		f.b.refs--
		if f.b.refs > 0 {
			continue
		}
		f.b.cancel()
		for _, g := range f.b.flights {
			if n.flights[g.key] == g && !g.finished {
				delete(n.flights, g.key)
			}
		}
	}
}

// finish records f's result, makes it ready and done, and wakes its
// waiters. Only the first result counts: finishing a flight that is ready
// only makes it done.
func (n *Node) finish(f *flight, got rafs.Chunk, stored []byte, err error, transient bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.readyLocked(f, got, stored, err, transient)
	n.keptLocked(f)
}

// ready records f's verified bytes and wakes the waiters that can use
// them before they are kept; kept must follow. Only the first result
// counts.
func (n *Node) ready(f *flight, got rafs.Chunk, stored []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.readyLocked(f, got, stored, nil, false)
}

// kept makes a ready flight done.
func (n *Node) kept(f *flight) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.keptLocked(f)
}

func (n *Node) readyLocked(f *flight, got rafs.Chunk, stored []byte, err error, transient bool) {
	if f.finished {
		return
	}
	f.finished = true
	f.got, f.stored, f.err, f.transient = got, stored, err, transient
	close(f.ready)
}

func (n *Node) keptLocked(f *flight) {
	if f.kept {
		return
	}
	f.kept = true
	if n.flights[f.key] == f {
		delete(n.flights, f.key)
	}
	close(f.done)
}
