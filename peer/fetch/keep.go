package fetch

import (
	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/cache"
)

// Where chunks land: a verified chunk is handed to its reads and kept
// (cached, held, announced); cached chunks found before a later round
// are taken the same way.

// fromCache finishes the pending chunks that are in the node cache now
// and known to be part of the blob (another read of the blob may have
// fetched them; a chunk cached for another blob, or by another process,
// is not known to be part of this one, and is fetched). It announces
// them, as a read served from the cache does: other peers may fetch them
// here, and an origin turn this node holds for one ends (nothing else
// would end it before OriginTimeout).
// As with a fetched chunk, the announcement goes before the readers are
// let go, so a reader that got the chunk can count on peers finding it.
func (e *Engine) fromCache(g *group) {
	type hit struct {
		f      *chunkFlight
		c      rafs.Chunk
		stored []byte
	}
	var announce []uint32
	var hits []hit
	for _, c := range g.chunks(nil) {
		if k := cache.KeyOf(c); !e.cache.Has(k) || !e.hold.PartOf(g.blob, k) {
			continue
		}
		if sc, stored, ok := e.readCache(c, nil); ok {
			if f := g.take(c.Ordinal); f != nil {
				e.m.Delivered(SourceCache, len(stored))
				hits = append(hits, hit{f, sc, stored})
			} else {
				bufpool.Put(stored)
			}
			// Announced even if held already: the read that kept it
			// may not have announced it yet, and this one's readers
			// must be able to count on peers finding it.
			e.hold.Hold(g.blob, c.Ordinal, cache.KeyOf(c))
			announce = append(announce, c.Ordinal)
		}
	}
	if len(announce) > 0 {
		e.router.Announce(g.blob, announce)
	}
	for _, h := range hits {
		e.finishPooled(h.f, h.c, h.stored) // read into a buffer of its own (nil dst)
	}
}

// keep handles a verified chunk of g, whose stored bytes it may keep (no
// one writes them any more): it hands them to the reads that can take a
// chunk before it is kept (the batch endpoint sends it meanwhile), then,
// in the background (at most maxBackgroundWrites at once on the node, so
// that the fetch verifies the next chunk meanwhile), caches the chunk,
// records it as held and announces it, and only then makes it done, for
// the reads that wait for that (so that a reader that got it can count on
// other peers finding it). The fetch waits for its writes before it ends.
//
// With pooled, stored is a buffer of its own that goes back to
// rafs/bufpool once the flight is done with it (or at once, for a copy
// that came second).
func (e *Engine) keep(g *group, c rafs.Chunk, stored []byte, source string, pooled bool) {
	f := g.take(c.Ordinal)
	if f == nil {
		// A copy that comes second (a hedged request and the one it
		// hedged both got it): the first is being kept.
		e.m.duplicate(len(stored))
		if pooled {
			bufpool.Put(stored)
		}
		return
	}
	e.m.Delivered(source, len(stored))
	e.flights.Resolve(f, fetched{got: c, stored: stored, pooled: pooled}, nil)
	e.writes <- struct{}{}
	g.keeping.Add(1)
	go func() {
		defer g.keeping.Done()
		defer func() { <-e.writes }()
		if err := e.cache.PutChunk(c, stored); err != nil {
			e.log.Warn("caching a chunk", "chunk", c.Digest, "err", err)
			// Not held after all: a turn to fetch it from origin, if
			// this node had one, goes to the next peer now rather than
			// when it times out (the announcement would have ended it).
			e.router.Abandon(g.blob, []uint32{c.Ordinal})
		} else if e.hold.Hold(g.blob, c.Ordinal, cache.KeyOf(c)); e.cache.Has(cache.KeyOf(c)) {
			e.router.Announce(g.blob, []uint32{c.Ordinal})
		} else {
			// Evicted between the write and the holding: the evict
			// hook may have run before there was a holding to drop.
			e.hold.Missed(g.blob, cache.KeyOf(c))
			e.router.Abandon(g.blob, []uint32{c.Ordinal})
		}
		e.kept.Add(1) // before the flight leaves the group (fetchGroup)
		e.flights.Settle(f)
	}()
}

// maxBackgroundWrites bounds the node's cache writes in flight.
const maxBackgroundWrites = 4
