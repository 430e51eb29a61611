package fetch

import (
	"context"
	"slices"
	"sync"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/flight"
	"damselfly/rafs/registry"
)

// Claimed is a fetch the caller makes itself, outside the engine's
// rounds (a plain pull fetching the pieces the Router assigned to one
// parent), held as the engine's flights: a read of one of its chunks
// meanwhile waits for the caller's fetch instead of starting its own,
// and the caller leaves out the chunks a read is fetching already. So a
// chunk comes to the node once however it is asked for. Safe for
// concurrent use.
type Claimed struct {
	e              *Engine
	up             registry.Ref
	blob, atOrigin rafs.Digest
	probed         uint64

	mu       sync.Mutex
	batch    *flight.Batch[flightKey, fetched]
	ctx      context.Context
	src      sourceKey
	lead     map[flightKey]wanted // the flights the caller leads, not yet kept
	chunks   []rafs.Chunk         // the chunks of lead, in the order asked
	refs     []*chunkFlight       // the references to give back
	handed   bool                 // the flights not kept went to the engine
	released bool
	stall    *time.Timer // hands them over when the caller's fetch stalls
}

// Claim takes the flights of cs, named blob (the Router's and the
// holdings' name) and read from the origin as atOrigin, with up's
// source, as ReadPieces would key them. Chunks that a read or another
// claim is fetching already are left out (Chunks). The caller fetches
// the others, calls Kept for each it verified, cached and holds, and
// then Release.
func (e *Engine) Claim(up registry.Ref, blob, atOrigin rafs.Digest, cs []rafs.Chunk) *Claimed {
	cl := &Claimed{e: e, up: up, blob: blob, atOrigin: atOrigin, probed: e.kept.Load(), src: sourceOf(up), lead: map[flightKey]wanted{}}
	if len(cs) == 0 {
		return cl
	}
	keys := make([]flightKey, len(cs))
	for i, c := range cs {
		keys[i] = flightKeyOf(blob, c, cl.src)
	}
	fs, b, ctx, shared := e.flights.Join(e.life, keys...)
	e.m.collapsed.Add(int64(shared))
	cl.batch, cl.ctx = b, ctx
	led := map[*chunkFlight]bool{}
	if b != nil {
		for _, f := range b.Flights() {
			led[f] = true
		}
	}
	var others []*chunkFlight
	for i, f := range fs {
		if led[f] {
			delete(led, f) // a key given twice: led once, the other reference given back
			cl.lead[keys[i]] = wanted{f, cs[i]}
			cl.chunks = append(cl.chunks, cs[i])
			cl.refs = append(cl.refs, f)
			continue
		}
		others = append(others, f)
	}
	// Another's fetch: nothing to wait for here.
	e.flights.Leave(others...)
	if len(cl.chunks) > 0 && e.cfg.HedgeDelay > 0 {
		// A read waiting on a claimed chunk must not wait out the
		// caller's whole request when its parent stalls: as the
		// engine hedges its own fetches, the flights go to the engine
		// after HedgeDelay without progress.
		cl.stall = time.AfterFunc(e.cfg.HedgeDelay, cl.handover)
	}
	return cl
}

// Progress tells the claim that the caller's fetch is moving (bytes
// arrived), putting off the handover of a stalled fetch.
func (c *Claimed) Progress() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stall != nil && !c.handed {
		c.stall.Reset(c.e.cfg.HedgeDelay)
	}
}

// Chunks returns the chunks the caller is to fetch: those of the claim
// no read or other claim was fetching.
func (c *Claimed) Chunks() []rafs.Chunk { return slices.Clone(c.chunks) }

// Kept finishes the flight of asked (one of Chunks, as given), which the
// caller fetched as got (the form its bytes are stored in), verified
// against its digest, cached and holds: the reads waiting on it get
// stored, as they would from the engine's own fetch. stored becomes the
// claim's: a buffer of its own, which goes back to rafs/bufpool once the
// reads are done with it (at once when the flight went to the engine).
func (c *Claimed) Kept(asked, got rafs.Chunk, stored []byte) {
	k := flightKeyOf(c.blob, asked, c.src)
	c.mu.Lock()
	w, ok := c.lead[k]
	if ok {
		delete(c.lead, k)
	}
	c.mu.Unlock()
	if !ok {
		bufpool.Put(stored)
		return
	}
	c.e.kept.Add(1) // before the flight leaves the group, as keep does
	c.e.finishPooled(w.f, got, stored)
}

// Release ends the claim. The flights of chunks that were not kept go to
// the engine, which fetches them for the reads waiting on them in its
// own rounds (parents, origin turns); with no read waiting, that fetch
// is cancelled at once. The caller's references are given back.
func (c *Claimed) Release() {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return
	}
	c.released = true
	if c.stall != nil {
		c.stall.Stop()
	}
	c.mu.Unlock()
	c.handover()
	c.e.flights.Leave(c.refs...)
}

// handover gives the flights not kept to the engine's fetch, once; Kept
// is a no-op for them after it.
func (c *Claimed) handover() {
	c.mu.Lock()
	if c.handed || c.batch == nil {
		c.mu.Unlock()
		return
	}
	c.handed = true
	left := make([]wanted, 0, len(c.lead))
	for _, ch := range c.chunks {
		if w, ok := c.lead[flightKeyOf(c.blob, ch, c.src)]; ok {
			left = append(left, w)
		}
	}
	c.lead = nil
	c.mu.Unlock()
	e := c.e
	if len(left) == 0 {
		c.batch.Cancel()
		return
	}
	e.m.claimHandovers.Add(int64(len(left)))
	if !e.launch(func() {
		defer c.batch.Cancel()
		e.fetch(c.ctx, c.up, c.blob, c.atOrigin, left, c.probed)
	}) {
		c.batch.Cancel()
		for _, w := range left {
			e.finish(w.f, rafs.Chunk{}, nil, ErrClosed, false)
		}
	}
}
