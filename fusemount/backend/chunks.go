package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/registry"
	"damselfly/rafs/runs"
)

// DeliverFunc receives the i-th chunk of a run with its stored bytes. c
// describes stored as delivered: its Flags and CompressedSize may differ
// from the chunk asked for when the local peer holds the other form
// (compressed or raw) of the same content. stored is valid only during the
// call. A non-nil error stops the read, which returns it wrapped.
type DeliverFunc func(i int, c rafs.Chunk, stored []byte) error

// DecodedDeliverFunc receives the i-th chunk of a run as DeliverFunc
// does, and also plain and src. src is the source that delivered this
// chunk. plain, when not nil, is the chunk's decoded content (c.Size
// bytes), already checked against c.Digest by this process on its way
// from the local peer's batch endpoint (chunkapi.Client), so the callee
// need not decode and hash it again, and src is SourceProxy: that peer
// puts the chunk in its node cache itself (it may still be doing so), so
// a callee sharing the cache need not write it. stored is valid only
// during the call; plain is made for this chunk alone, and the callee may
// keep it (nobody else writes it). plain is nil for bytes read by range (from the
// registry, an OCI layout, or a proxy without the batch endpoint): those
// are unverified and the callee must verify them (rafs.DecodeChunk).
type DecodedDeliverFunc func(i int, c rafs.Chunk, stored, plain []byte, src Source) error

// ReadChunksFrom reads chunks, a contiguous run of blob in offset order
// (each chunk's stored bytes start where the previous one's end), and
// calls deliver once for each chunk, in order, one call at a time.
//
// Through the local peer the chunks come from its batch endpoint, which
// verifies every chunk against its digest before delivering it. From the
// registry or an OCI layout the run's byte range is read and each chunk's
// slice delivered unverified: deliver must verify (rafs.DecodeChunk).
//
// The choice of source, the proxy's health, the fallback to the registry,
// the backoff and Config.Deadline follow ReadBlobFrom. A read that fails
// part-way goes on with the chunks not yet delivered: after a transient
// failure of the proxy, from the registry when Fallback is on (the proxy
// is marked unhealthy) or from the proxy again after a backoff; after a
// permanent one, from the registry when Fallback is on, else it fails.
//
// It returns the source that delivered the last chunk, or, on error, the
// source of the last attempt. Errors are a *ReadError (as ReadBlobFrom's)
// describing the undelivered rest of the run, or deliver's error wrapped;
// chunks before the failure were delivered. The run is checked first: a
// chunk of another blob, a gap or an overlap, or a run past the end of the
// blob fails with ErrRange before anything is sent. Safe for concurrent
// use.
func (b *Backend) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk, deliver DeliverFunc) (Source, error) {
	return b.ReadDecodedChunksFrom(ctx, blob, chunks, func(i int, c rafs.Chunk, stored, _ []byte, _ Source) error {
		return deliver(i, c, stored)
	})
}

// ReadDecodedChunksFrom is ReadChunksFrom for a caller that can use the
// decoded bytes of chunks already verified on their way from the local
// peer and wants to know which source delivered each chunk (see
// DecodedDeliverFunc). Everything else is as ReadChunksFrom.
func (b *Backend) ReadDecodedChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk, deliver DecodedDeliverFunc) (Source, error) {
	if b.closed.Load() {
		return "", b.runError(blob, chunks, "", 0, 0, ErrClosed)
	}
	if _, err := runs.Check(blob, chunks, maxRunBytes); err != nil {
		return "", b.runError(blob, chunks, "", 0, 0, fmt.Errorf("%w: %w", ErrRange, err))
	}
	if b.oci != nil {
		return SourceOCI, b.readChunksOCI(ctx, blob, chunks, deliver)
	}
	if len(chunks) == 0 {
		return b.choose(false, false), nil
	}
	return b.readChunksRemote(ctx, blob, chunks, deliver)
}

// maxRunBytes bounds the bytes of one run, checked before allocating a
// buffer for it (the mount's largest amplify_io).
const maxRunBytes = 64 << 20

// runError describes a failed run read by the byte range of chunks
// (runs.Of: unchecked when the run was refused).
func (b *Backend) runError(blob rafs.Blob, chunks []rafs.Chunk, src Source, attempts int, elapsed time.Duration, err error) *ReadError {
	r := runs.Of(chunks)
	e := b.readError(blob, int64(r.Off), nil, src, attempts, elapsed, err)
	e.Len = int64(r.Len())
	return e
}

// deliverError carries deliver's error through a source's read, so the
// read stops instead of treating it as the source's failure.
type deliverError struct {
	i   int
	c   rafs.Chunk
	err error
}

func (e *deliverError) Error() string {
	return fmt.Sprintf("deliver chunk %d (%s): %v", e.i, e.c.Digest, e.err)
}

func (e *deliverError) Unwrap() error { return e.err }

// readRun reads the byte range of chunks, a checked run (or a tail of
// one), with read and delivers each chunk's slice, numbering them from
// base.
func readRun(ctx context.Context, chunks []rafs.Chunk, base int, read func(ctx context.Context, off int64, p []byte) error, deliver DeliverFunc) error {
	r := runs.Of(chunks)
	stored := make([]byte, r.Len())
	if err := read(ctx, int64(r.Off), stored); err != nil {
		return err
	}
	for i, c := range chunks {
		if err := deliver(base+i, c, r.Stored(stored, c)); err != nil {
			return err
		}
	}
	return nil
}

// counter wraps a DecodedDeliverFunc for one attempt on src: it counts
// the chunks and stored bytes delivered and marks deliver's errors as a
// deliverError.
type counter struct {
	deliver DecodedDeliverFunc
	src     Source
	n       int
	bytes   uint64
}

// call delivers a chunk read by range: unverified, without plain.
func (c *counter) call(i int, k rafs.Chunk, stored []byte) error {
	return c.callDecoded(i, k, stored, nil)
}

// callDecoded delivers a chunk with plain, its verified decoded bytes,
// or nil when it is unverified.
func (c *counter) callDecoded(i int, k rafs.Chunk, stored, plain []byte) error {
	if err := c.deliver(i, k, stored, plain, c.src); err != nil {
		return &deliverError{i: i, c: k, err: err}
	}
	c.n++
	c.bytes += uint64(len(stored))
	return nil
}

func (b *Backend) readChunksOCI(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk, deliver DecodedDeliverFunc) error {
	if len(chunks) == 0 {
		return nil
	}
	st := &b.stats.oci
	st.requests.Add(1)
	read := func(ctx context.Context, off int64, p []byte) error { return b.oci.read(ctx, blob.Digest, off, p) }
	cnt := &counter{deliver: deliver, src: SourceOCI}
	err := readRun(ctx, chunks, 0, read, cnt.call)
	st.bytes.Add(cnt.bytes)
	var de *deliverError
	switch {
	case errors.As(err, &de):
		return fmt.Errorf("read chunks of blob %s from %s: %w", blob.Digest, SourceOCI, de)
	case err != nil:
		st.errors.Add(1)
		return b.runError(blob, chunks[cnt.n:], SourceOCI, 1, 0, err)
	}
	return nil
}

// readChunksRemote is a registry-type read of a run: each attempt asks
// for the chunks not yet delivered.
func (b *Backend) readChunksRemote(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk, deliver DecodedDeliverFunc) (Source, error) {
	next := 0 // chunks delivered
	src, err := b.retry(ctx,
		func(ctx context.Context, src Source, again bool) error {
			n, err := b.attemptChunks(ctx, src, blob, chunks[next:], next, deliver, again)
			next += n
			return err
		},
		func(src Source, attempts int, elapsed time.Duration, err error) error {
			return b.runError(blob, chunks[next:], src, attempts, elapsed, err)
		})
	var de *deliverError
	if errors.As(err, &de) {
		return src, fmt.Errorf("read chunks of blob %s from %s: %w", blob.Digest, src, de)
	}
	return src, err
}

// attemptChunks sends one request for chunks (numbered from base) to src,
// bounded by Config.Timeout, and counts it. It returns how many chunks
// were delivered; an error from deliver comes back as a *deliverError.
func (b *Backend) attemptChunks(ctx context.Context, src Source, blob rafs.Blob, chunks []rafs.Chunk, base int, deliver DecodedDeliverFunc, retry bool) (int, error) {
	st := b.stats.of(src)
	st.requests.Add(1)
	if retry {
		st.retries.Add(1)
	}
	if src == SourceRegistry && b.proxy != nil {
		b.stats.fallbacks.Add(1)
	}
	actx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	cnt := &counter{deliver: deliver, src: src}
	var err error
	if src == SourceProxy {
		err = b.proxy.readDecodedChunks(actx, b.reg, blob, chunks, base, cnt)
	} else {
		read := func(ctx context.Context, off int64, p []byte) error { return b.reg.read(ctx, blob.Digest, off, p) }
		err = readRun(actx, chunks, base, read, cnt.call)
	}
	st.bytes.Add(cnt.bytes)
	var de *deliverError
	if err != nil && !errors.As(err, &de) {
		st.errors.Add(1)
		if ctx.Err() == nil && actx.Err() != nil {
			err = fmt.Errorf("%w after %s: %v", errTimeout, b.cfg.Timeout, err)
		}
	}
	return cnt.n, err
}

// readDecodedChunks is readChunks (proxy.go) handing cnt the decoded
// bytes the batch endpoint's client verified; chunks read by range, from
// a proxy without that endpoint, go to cnt without them.
func (p *proxy) readDecodedChunks(ctx context.Context, reg *regClient, blob rafs.Blob, chunks []rafs.Chunk, base int, cnt *counter) error {
	if !p.noBatch.Load() {
		up := registry.Ref{Registry: reg.origin(), Repo: reg.repo.RepositoryStr(), Authorization: reg.authorization()}
		var delivered int
		err := p.chunks.ReadChunksDecoded(ctx, up, blob.Digest, chunks, func(i int, c rafs.Chunk, stored, plain []byte) error {
			delivered = i + 1
			return cnt.callDecoded(base+i, c, stored, plain)
		})
		if delivered > 0 || !noBatchEndpoint(err) {
			return chunkErr(err)
		}
		if p.noBatch.CompareAndSwap(false, true) {
			p.log.Info("backend proxy has no batch chunk endpoint; reading byte ranges through it", "proxy", p.shown, "err", err)
		}
	}
	read := func(ctx context.Context, off int64, buf []byte) error { return p.read(ctx, reg, blob.Digest, off, buf) }
	return readRun(ctx, chunks, base, read, cnt.call)
}
