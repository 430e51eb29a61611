package fetch

import (
	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/flight"
	"damselfly/rafs/registry"
)

// The engine's chunks in flight are a flight.Group keyed by flightKey
// (the chunk's digest and digest algorithm, the read's source and its
// description of the chunk), so that concurrent reads of a chunk that
// would fetch it alike wait for one fetch. The misses of one read that
// no flight covers are a batch, fetched by one goroutine (fetch). A
// fetched chunk is resolved once verified and settled once kept
// (cached, recorded and announced); a failed one or a cache hit is both
// at once. It stays in the group until settled, so that a read coming
// meanwhile joins it rather than fetching the chunk again. A batch is
// cancelled when no read holds any of its flights any more.

// chunkFlight is one chunk being fetched.
type chunkFlight = flight.Flight[flightKey, fetched]

// fetched is a flight's result: the chunk as its bytes are stored, and
// for an error, whether it may pass if asked again. With pooled, stored
// is a buffer of its own (not a slice of another's, such as an origin
// run's) that goes back to rafs/bufpool when the flight is settled and
// its last read has left it (flight.Group.SetRelease): the reads deliver
// it and keep nothing (ReadChunks' contract), and the cache copies it.
type fetched struct {
	got       rafs.Chunk
	stored    []byte
	transient bool
	pooled    bool
}

// release gives a pooled result's buffer back.
func (v fetched) release() {
	if v.pooled {
		bufpool.Put(v.stored)
	}
}

// wanted is a chunk a batch leads the flight of, as the leading read
// asked for it: a flight's fetch uses its leading read's description.
type wanted struct {
	f *chunkFlight
	c rafs.Chunk
}

// join returns a flight for each chunk of cs, joining the flights in
// progress for their keys (the chunk's digest and algorithm, up's source,
// blob and the chunk's description) and starting one fetch for the rest.
// Every flight returned holds a reference that leave releases.
func (e *Engine) join(up registry.Ref, blob, atOrigin rafs.Digest, cs []rafs.Chunk, probed uint64) []*chunkFlight {
	src := sourceOf(up)
	keys := make([]flightKey, len(cs))
	for i, c := range cs {
		keys[i] = flightKeyOf(blob, c, src)
	}
	fs, b, ctx, shared := e.flights.Join(e.life, keys...)
	e.m.collapsed.Add(int64(shared))
	if b == nil {
		return fs
	}
	// The batch's flights are in the order of their keys' first
	// occurrence in cs: pair each with the chunk that asked for it.
	led := b.Flights()
	lead := make([]wanted, 0, len(led))
	for i, f := range fs {
		if len(lead) < len(led) && f == led[len(lead)] {
			lead = append(lead, wanted{f, cs[i]})
		}
	}
	if !e.launch(func() {
		defer b.Cancel()
		e.fetch(ctx, up, blob, atOrigin, lead, probed)
	}) {
		b.Cancel()
		for _, w := range lead {
			e.finish(w.f, rafs.Chunk{}, nil, ErrClosed, false)
		}
	}
	return fs
}

// launch runs fn on a goroutine that Close waits for; false after Close.
func (e *Engine) launch(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
	return true
}

// leave releases the references join returned, cancelling each batch that
// no read waits for any more (flight.Group.Leave).
func (e *Engine) leave(fs []*chunkFlight) {
	e.flights.Leave(fs...)
}

// finish records f's result, makes it ready and done, and wakes its
// waiters. Only the first result counts: finishing a flight that is ready
// only makes it done.
func (e *Engine) finish(f *chunkFlight, got rafs.Chunk, stored []byte, err error, transient bool) {
	e.flights.Finish(f, fetched{got: got, stored: stored, transient: transient}, err)
}

// finishPooled is finish with a chunk's bytes in a buffer of their own,
// which the flight gives back to rafs/bufpool when done with it.
func (e *Engine) finishPooled(f *chunkFlight, got rafs.Chunk, stored []byte) {
	e.flights.Finish(f, fetched{got: got, stored: stored, pooled: true}, nil)
}
