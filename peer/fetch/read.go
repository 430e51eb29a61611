package fetch

import (
	"context"

	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
)

// ReadChunks implements proxy.ChunkSource. Chunks the node cache holds
// are read and verified from it; the misses are fetched in one batch in
// the background (collapsed with other reads' fetches of the same
// digests) while deliver is called in request order, so chunks that
// arrive early wait in memory for their turn. A fetched chunk is
// delivered once it is cached and announced. A chunk nobody can serve is
// retried until Config.FetchDeadline passes without progress; the
// error then wraps a *chunkapi.ChunkError naming it.
func (e *Engine) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return e.readChunks(ctx, up, blob, blob, chunks, true, deliver)
}

// ReadChunksEarly implements proxy.EarlyChunkSource: it is ReadChunks
// delivering each fetched chunk as soon as it is verified, while this
// node caches and announces it.
func (e *Engine) ReadChunksEarly(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return e.readChunks(ctx, up, blob, blob, chunks, false, deliver)
}

// ReadPieces is ReadChunks of chunks of blob under another name: name
// is what the Router, the holdings and other peers know them by (a plain
// blob's pieces travel under the blob's plain key: peer/plain.go), blob
// what the origin registry is asked for.
func (e *Engine) ReadPieces(ctx context.Context, up registry.Ref, name, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return e.readChunks(ctx, up, name, blob, chunks, true, deliver)
}

// readChunks is ReadChunks of chunks named blob and read from the origin
// as atOrigin, which waits until a fetched chunk is kept (cached and
// announced) before delivering it when waitKept is set.
func (e *Engine) readChunks(ctx context.Context, up registry.Ref, blob, atOrigin rafs.Digest, chunks []rafs.Chunk, waitKept bool,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	if len(chunks) == 0 {
		return nil
	}
	// Misses go into one fetch now; hits are read when their turn comes,
	// so that a big batch of hits is not buffered.
	var missIdx []int
	var missChunks []rafs.Chunk
	for i, c := range chunks {
		if err := checkChunk(c); err != nil {
			e.m.failure()
			return chunkError(i, false, err)
		}
	}
	probed := e.kept.Load()
	for i, c := range chunks {
		// A hit only for a chunk known to be part of blob (holdsKey):
		// one that is in the cache for another blob is fetched as part
		// of this one, which proves it is.
		if k := cache.KeyOf(c); !e.cache.Has(k) || !e.hold.PartOf(blob, k) {
			missIdx = append(missIdx, i)
			missChunks = append(missChunks, c)
		}
	}
	flights := make(map[int]*chunkFlight, len(missIdx))
	if len(missChunks) > 0 {
		fs := e.join(up, blob, atOrigin, missChunks, probed)
		defer e.leave(fs)
		for j, i := range missIdx {
			flights[i] = fs[j]
		}
	}
	var announce []uint32
	defer func() {
		if len(announce) > 0 {
			e.router.Announce(blob, announce)
		}
	}()
	for i, c := range chunks {
		f := flights[i]
		if f == nil {
			if sc, stored, ok := e.readCache(c, nil); ok {
				e.m.Delivered(SourceCache, len(stored))
				if e.hold.Hold(blob, c.Ordinal, cache.KeyOf(c)) {
					// Held under another ordinal of the blob.
					announce = append(announce, c.Ordinal)
				}
				err := deliver(i, sc, stored)
				// deliver does not keep stored (ReadChunks' contract):
				// the buffer, the pool's, serves a later chunk.
				bufpool.Put(stored)
				if err != nil {
					return err
				}
				continue
			}
			// Evicted since Has, or corrupt: fetch it on its own.
			fs := e.join(up, blob, atOrigin, []rafs.Chunk{c}, e.kept.Load())
			defer e.leave(fs)
			f = fs[0]
		}
		wait := f.Ready()
		if waitKept {
			wait = f.Done()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			e.m.failure()
			return chunkError(i, true, ctx.Err())
		}
		got, err := f.Result()
		if err != nil {
			e.m.failure()
			return chunkError(i, got.transient, err)
		}
		// The flight may be another read's, for the same content at
		// another place: deliver c in the form the bytes are stored.
		dc := c
		dc.Flags = c.Flags&^rafs.ChunkCompressed | got.got.Flags&rafs.ChunkCompressed
		dc.CompressedSize = got.got.CompressedSize
		if err := deliver(i, dc, got.stored); err != nil {
			return err
		}
	}
	return nil
}

// readCache reads c's stored bytes from the node cache into dst (grown
// as needed; the result aliases it when it is large enough) and
// verifies them, unless the cache vouches for them (this process wrote
// or verified that very entry file: cache.GetVerified). The chunk
// returned describes the stored form, which may differ from c's. An
// entry that fails verification is removed.
func (e *Engine) readCache(c rafs.Chunk, dst []byte) (rafs.Chunk, []byte, bool) {
	// The chunk as stored: the same content may be cached raw from one
	// blob and compressed from another.
	storedAs := func(m cache.Meta) rafs.Chunk {
		sc := c
		sc.Size = m.Size
		sc.CompressedSize = m.StoredSize
		if m.Compressed {
			sc.Flags |= rafs.ChunkCompressed
		} else {
			sc.Flags &^= rafs.ChunkCompressed
		}
		return sc
	}
	meta, stored, err := e.cache.GetVerified(cache.KeyOf(c), dst, func(m cache.Meta, stored []byte) error {
		// The entry is judged as what its header says it is (a request
		// that gives another size is wrong, not the entry).
		scratch := getScratch()
		defer putScratch(scratch)
		if err := rafs.VerifyChunk(storedAs(m), stored, scratch); err != nil {
			e.log.Warn("cached chunk fails verification; removing it", "chunk", c.Digest, "err", err)
			return err
		}
		return nil
	})
	if err != nil || meta.Size != c.Size {
		return c, nil, false
	}
	return storedAs(meta), stored, true
}
