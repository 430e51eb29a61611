package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/bufpool"
)

// ReadIdleTimeout is how long Fetch waits for any progress from the peer
// (the response header, or more bytes of a chunk) before giving up, when
// ctx allows longer.
const ReadIdleTimeout = 30 * time.Second

// FetchResult says what became of each chunk of a Fetch. Every requested
// chunk is in exactly one of: delivered (counted), Missing, OtherAlgo,
// Bad or Unanswered.
type FetchResult struct {
	// Delivered counts the chunks verified and passed to deliver; they
	// are a prefix of the request, less Missing and OtherAlgo.
	Delivered int
	// Bytes counts the stored bytes of the delivered chunks.
	Bytes int64
	// Missing chunks the peer answered it does not hold (or could not
	// read). Ask elsewhere; the peer did nothing wrong.
	Missing []rafs.Chunk
	// OtherAlgo chunks the peer holds under the same digest with the
	// other digest algorithm: it said so, or sent bytes that verify only
	// under that one. The request described them wrongly; the peer did
	// nothing wrong, and still holds what it announced.
	OtherAlgo []rafs.Chunk
	// Bad holds the chunk whose bytes failed verification (at most one:
	// the stream is abandoned there). The error wraps ErrBadChunk.
	Bad []rafs.Chunk
	// Unanswered chunks were not answered because the exchange stopped
	// first; the error says why.
	Unanswered []rafs.Chunk
}

// Fetch asks peer p for chunks of blob over one new stream and calls
// deliver, in request order, for each chunk the peer sends that verifies
// (rafs.DecodeChunk) against its digest. Chunks that fail verification or
// that the peer does not hold are never delivered; the result lists them.
// Bytes that fail under the requested digest algorithm but verify under
// the other are no fault of the peer's: the request was wrong (its
// digest is of the other algorithm), and the chunk is listed in
// OtherAlgo, not Bad, and the fetch goes on.
//
// deliver gets the requested chunk with Flags and CompressedSize
// describing the stored bytes as sent, which may be the other form than
// requested (the peer may hold the same content raw or compressed); stored
// is deliver's to keep: each chunk arrives in a buffer of its own, which
// Fetch does not touch after the call, and which its owner may give to
// rafs/bufpool once nothing uses it (a chunk hashed as stored comes in a
// buffer of the pool, or of a pool class's capacity). An error from deliver stops the fetch and
// is returned, wrapped. A nil deliver only verifies.
//
// The batch must satisfy the protocol's limits (at most
// MaxChunksPerBatch chunks, MaxBatchBytes in all, sizes within
// rafs.MaxChunkSize), else Fetch returns ErrInvalidRequest without
// sending anything. Fetch returns when the last chunk is answered, on the
// first error, when ctx is done (it resets the stream), or when the peer
// makes no progress for ReadIdleTimeout (an error wrapping
// os.ErrDeadlineExceeded). Errors branch on ErrBusy,
// ErrRefused, ErrUnavailable, ErrBadChunk and ErrProtocol; the last two
// mean the peer misbehaved. The result is valid with or without an error.
// Fetch is safe for concurrent use.
func Fetch(ctx context.Context, h host.Host, p peer.ID, blob rafs.Digest, chunks []rafs.Chunk, deliver func(c rafs.Chunk, stored []byte) error) (FetchResult, error) {
	return FetchWatched(ctx, h, p, blob, chunks, deliver, nil)
}

// FetchWatched is Fetch that also calls onBytes with the count of every
// read of the answer that brought bytes (from the reading goroutine), so
// that a caller can tell a parent that is slow but sending from one that
// sends nothing. onBytes may be nil.
func FetchWatched(ctx context.Context, h host.Host, p peer.ID, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(c rafs.Chunk, stored []byte) error, onBytes func(n int)) (FetchResult, error) {
	res := FetchResult{Unanswered: chunks}
	if deliver == nil {
		deliver = func(rafs.Chunk, []byte) error { return nil }
	}
	if err := checkBatch(chunks); err != nil {
		return res, err
	}
	s, err := h.NewStream(ctx, p, ProtocolID)
	if err != nil {
		return res, fmt.Errorf("fetch from %s: open stream: %w", p, err)
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetWriteDeadline(dl)
	} else {
		_ = s.SetWriteDeadline(time.Now().Add(ReadIdleTimeout))
	}
	_, werr := s.Write(appendRequest(nil, blob, chunks))
	if werr == nil {
		werr = s.CloseWrite()
	}
	// Read the answer even if the write failed: a busy or closing server
	// answers without reading the request and closes its side.
	r := &idleReader{s: s, idle: ReadIdleTimeout, onBytes: onBytes}
	if dl, ok := ctx.Deadline(); ok {
		r.limit = dl
	}
	err = readResponse(r, chunks, deliver, &res)
	if err == nil {
		s.Close()
		return res, nil
	}
	s.Reset()
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, ErrBadChunk) && !errors.Is(err, ErrProtocol) {
		err = fmt.Errorf("%w (%v)", cerr, err)
	} else if werr != nil && res.Delivered == 0 && len(res.Missing) == 0 && len(res.Bad) == 0 && !isAnswer(err) {
		err = fmt.Errorf("send request: %w", werr)
	}
	return res, fmt.Errorf("fetch %d chunks of %s from %s: %w", len(chunks), blob, p, err)
}

// isAnswer reports whether err came from the peer's answer rather than
// from the stream.
func isAnswer(err error) bool {
	for _, e := range []error{ErrBusy, ErrRefused, ErrUnavailable, ErrBadChunk, ErrProtocol} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// readResponse reads the answer to a request for chunks from r, verifies
// each chunk and delivers it, recording the outcome in res.
func readResponse(r io.Reader, chunks []rafs.Chunk, deliver func(rafs.Chunk, []byte) error, res *FetchResult) error {
	res.Unanswered = chunks
	st, msg, err := readResponseHead(r)
	if err != nil {
		return err
	}
	switch st {
	case StatusBusy:
		return ErrBusy
	case StatusUnavailable:
		return ErrUnavailable
	case StatusBadRequest:
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	}
	dp := bufPool.Get().(*[]byte)
	defer bufPool.Put(dp)
	for i, c := range chunks {
		res.Unanswered = chunks[i:]
		st, compressed, n, err := readRecordHead(r, c)
		if err != nil {
			return fmt.Errorf("chunk %d (%s): %w", i, c.Digest, err)
		}
		switch st {
		case chunkOtherAlgo:
			res.OtherAlgo = append(res.OtherAlgo, c)
			continue
		case chunkNotFound, chunkError:
			res.Missing = append(res.Missing, c)
			continue
		}
		// n is at most allowance(c), which the request's limits bound,
		// but it is the peer's word: the buffer grows as the bytes
		// come. A buffer per chunk: deliver keeps it (the node caches
		// the chunk and serves it from memory meanwhile), where a
		// reused one would have to be copied; its owner gives it back
		// to the pool when done with it.
		sc := served(c, compressed, n)
		stored, bad, err := readStored(r, sc, dp)
		if err != nil {
			return fmt.Errorf("chunk %d (%s): read %d stored bytes: %w", i, c.Digest, n, err)
		}
		if fc, flips := flipAlgo(sc); bad != nil && flips && rafs.VerifyChunk(fc, stored, dp) == nil {
			// Honest bytes of the chunk the digest names under the
			// other algorithm (a server of the release before does
			// not tell the algorithms apart): not the peer's fault.
			bufpool.Put(stored)
			res.OtherAlgo = append(res.OtherAlgo, c)
			res.Unanswered = chunks[i+1:]
			continue
		}
		if bad != nil {
			bufpool.Put(stored)
			res.Bad = []rafs.Chunk{c}
			res.Unanswered = chunks[i+1:]
			return fmt.Errorf("%w: chunk %d: %w", ErrBadChunk, i, bad)
		}
		res.Delivered++
		res.Bytes += int64(n)
		res.Unanswered = chunks[i+1:]
		if err := deliver(sc, stored); err != nil {
			return fmt.Errorf("deliver chunk %d (%s): %w", i, c.Digest, err)
		}
	}
	res.Unanswered = nil
	return nil
}

// readStored reads chunk c's stored bytes (c.CompressedSize of them)
// from r into a new buffer that grows as they arrive, and verifies them:
// bad is the verification's failure, err a read's. A chunk checked by its
// stored bytes alone (c.HashesStored: a raw one, or any blake3-stored
// one) is hashed as it arrives, while still in the CPU's caches, and
// never decoded; other compressed chunks are decoded into scratch.
func readStored(r io.Reader, c rafs.Chunk, scratch *[]byte) (stored []byte, bad, err error) {
	if c.HashesStored() {
		stored, err := rafs.ReadRawChunkGrowing(r, c, firstChunkAlloc)
		if errors.Is(err, rafs.ErrDigestMismatch) {
			return stored, err, nil
		}
		return stored, nil, err
	}
	if stored, err = readGrowing(r, int(c.CompressedSize), firstChunkAlloc); err != nil {
		return nil, nil, err
	}
	return stored, rafs.VerifyChunk(c, stored, scratch), nil
}

// idleReader reads from a stream with a deadline that moves with
// progress: each read must return within idle, and none after limit (when
// set).
type idleReader struct {
	s       network.Stream
	idle    time.Duration
	limit   time.Time
	set     time.Time   // when the deadline was last moved
	onBytes func(n int) // nil: none
}

func (r *idleReader) Read(p []byte) (int, error) {
	now := time.Now()
	// Moving the deadline costs a timer reset; do it at most 4 times per
	// idle period. The deadline is then between 3/4 idle and idle away.
	if now.Sub(r.set) > r.idle/4 {
		d := now.Add(r.idle)
		if !r.limit.IsZero() && r.limit.Before(d) {
			d = r.limit
		}
		_ = r.s.SetReadDeadline(d)
		r.set = now
	}
	n, err := r.s.Read(p)
	if n > 0 && r.onBytes != nil {
		r.onBytes(n)
	}
	var te interface{ Timeout() bool }
	if err != nil && errors.As(err, &te) && te.Timeout() {
		err = fmt.Errorf("peer made no progress in time (%v): %w", err, os.ErrDeadlineExceeded)
	}
	return n, err
}
