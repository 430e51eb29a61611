package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"damselfly/rafs"
	"damselfly/rafs/piece"
	"damselfly/rafs/registry"
)

// piecesPerRead is how many pieces one ReadPieces call asks for while a
// plain blob is served from pieces, and prefetchWindows how many windows
// after the one being written are fetched meanwhile: with 4 MiB pieces,
// at most 48 MiB are in flight per response.
const (
	piecesPerRead   = 4
	prefetchWindows = 2
)

// errNothingSent is servePieces' error when it failed before sending a
// byte, so the blob can still come from the origin.
var errNothingSent = errors.New("no piece served")

// serveBlob answers a GET of a blob when the ChunkSource can serve plain
// blobs from peers (BlobSource):
//
//   - a whole-blob GET with a piece table (the node's own, or one from a
//     peer holding the blob) is served from pieces, each verified against
//     the table, the whole against the blob digest (servePieces);
//   - a Range GET is served from pieces only with a table this node has
//     itself checked against the whole blob;
//   - otherwise, and whenever the pieces fail before a byte was sent, the
//     GET passes through to the origin as before; a whole-blob pass-through
//     is recorded (piece.Recorder), so that after its digest matched the
//     node serves the blob's pieces to peers.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, bs BlobSource, ref registry.Ref, path string, blob rafs.Digest) (served string) {
	rng := r.Header.Get("Range")
	t, verified := bs.PieceTable(r.Context(), ref, blob, rng == "")
	if t != nil && rng != "" {
		if off, end, ok := parseRange(rng, t.Size); ok {
			if err := s.serveRange(w, r, bs, ref, t, off, end); err == nil || !errors.Is(err, errNothingSent) {
				return ServedNode
			}
		}
		t = nil
	}
	if t != nil {
		served = ServedPeers
		if verified {
			served = ServedNode
		}
		err := s.servePieces(w, r, bs, ref, t, verified)
		if err == nil || !errors.Is(err, errNothingSent) {
			return served
		}
		s.log.Debug("plain blob: pieces failed; passing through", "blob", blob, "err", err)
	}
	var rw *recordingWriter
	if rng == "" {
		rw = &recordingWriter{ResponseWriter: w, rec: bs.RecordBlob(ref, blob), log: s.log, blob: blob}
	}
	var fw http.ResponseWriter
	if rw != nil {
		fw = rw
	}
	served = s.passThrough(w, r, ref, path, fw)
	if rw != nil && !rw.finished {
		_ = rw.rec.Finish(false)
	}
	return served
}

// recordingWriter passes a pass-through response on to the client, and
// the body of a 200 with a Content-Length to a recorder first: the
// recording is finished (the pieces kept and announced when the digest
// matched) before the client gets the last bytes, so a client that has
// the blob can count on other nodes finding it.
type recordingWriter struct {
	http.ResponseWriter
	rec      piece.Recorder
	log      *slog.Logger
	blob     rafs.Digest
	code     int
	want     int64 // Content-Length of a 200; -1 if none
	got      int64
	finished bool
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
		w.want = -1
		if n, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil && code == http.StatusOK {
			w.want = n
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.want >= 0 && !w.finished {
		w.rec.Write(p)
		w.got += int64(len(p))
		if w.got >= w.want {
			w.finished = true
			if err := w.rec.Finish(w.got == w.want); err != nil {
				w.log.Warn("plain blob from the origin not kept for peers", "blob", w.blob, "err", err)
			}
		}
	}
	return w.ResponseWriter.Write(p)
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// blobHeaders sets the headers of a blob served from pieces.
func blobHeaders(h http.Header, t *piece.Table, n int64) {
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Docker-Content-Digest", t.Blob.String())
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Length", strconv.FormatInt(n, 10))
}

// servePieces sends the whole blob from its pieces, in order, each
// verified against t by ReadChunks. Unless this node has checked t
// against the whole blob already (verified), it hashes the whole as it
// goes and holds the last piece back until the whole blob has matched its
// digest: a client is never sent the complete body of a wrong blob. On a
// mismatch the table is settled as bad (the node drops its pieces and
// reports the peer it came from) and the response is cut short, which the
// client sees as a broken transfer (fewer bytes than Content-Length) and
// retries; the retry goes to the origin, since the table is gone. With a
// verified table, pieces that match it are the blob: hashing the whole
// again would only cost a warm pull a second pass over every byte. A
// failure before the first byte returns errNothingSent.
func (s *Server) servePieces(w http.ResponseWriter, r *http.Request, bs BlobSource, up registry.Ref, t *piece.Table, verified bool) error {
	ctx := r.Context()
	var whole hash.Hash
	if !verified {
		whole = sha256.New()
	}
	sent := false
	last := t.Count() - 1
	var held []byte
	deliver := func(first int) func(int, rafs.Chunk, []byte) error {
		return func(i int, _ rafs.Chunk, b []byte) error {
			if whole != nil {
				whole.Write(b)
			}
			if first+i == last && whole != nil {
				held = bytes.Clone(b)
				return nil
			}
			if !sent {
				blobHeaders(w.Header(), t, t.Size)
				w.WriteHeader(http.StatusOK)
				sent = true
			}
			_, err := w.Write(b)
			return err
		}
	}
	prefetch := newPrefetch(ctx, bs, up, t)
	defer prefetch.stop()
	for first := 0; first <= last; first += piecesPerRead {
		end := min(first+piecesPerRead, last+1)
		prefetch.ahead(end + prefetchWindows*piecesPerRead)
		if err := bs.ReadPieces(ctx, up, t, first, end, deliver(first)); err != nil {
			// Not the table's fault as far as anyone knows (pieces that
			// nobody could serve in time): nothing is settled.
			if !sent {
				return fmt.Errorf("%w: %w", errNothingSent, err)
			}
			s.log.Warn("plain blob: pieces failed after the response began; cutting it short", "blob", t.Blob, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
	if whole != nil && rafs.Digest(whole.Sum(nil)) != t.Blob {
		bs.SettleTable(t.Blob, t, false)
		s.log.Warn("plain blob read from pieces fails its digest; dropped", "blob", t.Blob, "sent", sent)
		if !sent {
			return fmt.Errorf("%w: blob %s fails its digest", errNothingSent, t.Blob)
		}
		panic(http.ErrAbortHandler)
	}
	if !verified {
		bs.SettleTable(t.Blob, t, true)
	}
	if !sent {
		blobHeaders(w.Header(), t, t.Size)
		w.WriteHeader(http.StatusOK)
	}
	if held != nil {
		_, _ = w.Write(held)
	}
	s.m.peerBlobBytes.Add(float64(t.Size))
	return nil
}

// serveRange sends bytes [off, end) of a blob from the pieces that cover
// them, each verified against t (which this node has checked against the
// whole blob).
func (s *Server) serveRange(w http.ResponseWriter, r *http.Request, bs BlobSource, up registry.Ref, t *piece.Table, off, end int64) error {
	first, last := t.Covering(off, end)
	sent := false
	err := bs.ReadPieces(r.Context(), up, t, first, last, func(i int, c rafs.Chunk, b []byte) error {
		lo := max(off-int64(c.CompressedOffset), 0)
		hi := min(end-int64(c.CompressedOffset), int64(len(b)))
		if !sent {
			blobHeaders(w.Header(), t, end-off)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, end-1, t.Size))
			w.WriteHeader(http.StatusPartialContent)
			sent = true
		}
		_, err := w.Write(b[lo:hi])
		return err
	})
	if err != nil {
		if !sent {
			return fmt.Errorf("%w: %w", errNothingSent, err)
		}
		panic(http.ErrAbortHandler)
	}
	s.m.peerBlobBytes.Add(float64(end - off))
	return nil
}

// parseRange reads a single byte range, "bytes=A-B", "bytes=A-" or
// "bytes=-N", of a blob of size bytes, as [off, end). Anything else
// (several ranges, a range outside the blob) is left to the origin.
func parseRange(h string, size int64) (off, end int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		return max(size-n, 0), size, true
	}
	off, err := strconv.ParseInt(a, 10, 64)
	if err != nil || off < 0 || off >= size {
		return 0, 0, false
	}
	end = size
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < off {
			return 0, 0, false
		}
		end = min(e+1, size)
	}
	return off, end, true
}

// piecePrefetch fetches the windows of pieces after the one being read
// in the background, into the node cache. The read of a window joins the
// fetches in progress for its pieces (the node collapses fetches by
// digest), so up to prefetchWindows+1 windows are in flight at once, over
// as many exchange streams.
type piecePrefetch struct {
	bs     BlobSource
	up     registry.Ref
	t      *piece.Table
	ctx    context.Context
	cancel context.CancelFunc
	next   int // first piece not yet asked for
	wg     sync.WaitGroup
}

func newPrefetch(ctx context.Context, bs BlobSource, up registry.Ref, t *piece.Table) *piecePrefetch {
	ctx, cancel := context.WithCancel(ctx)
	return &piecePrefetch{bs: bs, up: up, t: t, ctx: ctx, cancel: cancel, next: piecesPerRead}
}

// ahead starts the fetches of the windows before piece limit.
func (p *piecePrefetch) ahead(limit int) {
	for p.next < min(limit, p.t.Count()) {
		first := p.next
		end := min(first+piecesPerRead, p.t.Count())
		p.next = end
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = p.bs.ReadPieces(p.ctx, p.up, p.t, first, end, nil)
		}()
	}
}

// stop ends the fetches in progress and waits for them.
func (p *piecePrefetch) stop() {
	p.cancel()
	p.wg.Wait()
}
