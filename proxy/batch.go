package proxy

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// serveChunks is the batch endpoint: it checks the request, answers 200
// and streams one frame per chunk as the ChunkSource delivers it,
// flushing each, and a failed frame for the first chunk it cannot get.
// To a client that accepts chunkapi.ContentTypeChunksV2, an EarlyChunkSource's
// chunks go out as soon as they are verified.
func (s *Server) serveChunks(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, chunkapi.MaxBatchRequest))
	if err != nil {
		http.Error(w, "batch request: "+err.Error(), http.StatusBadRequest)
		return
	}
	repo, blob, chunks, err := chunkapi.ParseRequest(data)
	if err != nil {
		http.Error(w, "batch request: "+err.Error(), http.StatusBadRequest)
		return
	}
	reg, err := s.registryFor(r)
	if err != nil {
		http.Error(w, "batch request: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.m.batchChunks.Observe(float64(len(chunks)))

	ref := registry.Ref{Registry: reg, Repo: repo, Authorization: r.Header.Get("Authorization")}
	// Chunks of the blob only to a client the registry would give the
	// blob to.
	d := s.gate.authorize(r.Context(), ref, "blobs", blob.String(), r.Header.Get(chunkapi.HeaderGrant))
	s.m.authorize(d)
	if !d.allowed {
		code, msg := refusal(d, reg)
		s.log.Info("batch request refused", "registry", reg, "repo", repo, "blob", blob, "why", msg)
		http.Error(w, "batch request: "+msg, code)
		return
	}
	w.Header().Set(chunkapi.HeaderGrant, s.gate.grantFor(ref, "blobs", blob.String()))

	v2 := acceptsV2(r.Header.Values("Accept"))
	rc := http.NewResponseController(w)
	if v2 {
		w.Header().Set("Content-Type", chunkapi.ContentTypeChunksV2)
	} else {
		w.Header().Set("Content-Type", chunkapi.ContentTypeChunks)
	}
	w.WriteHeader(http.StatusOK)
	rc.Flush()

	next := 0
	var writeErr error
	var hdr []byte
	deliver := func(i int, c rafs.Chunk, stored []byte) error {
		switch {
		case i != next:
			return fmt.Errorf("chunk source delivered chunk %d, want %d", i, next)
		case c.Flags&^chunkapi.KnownFlags != 0 || len(stored) == 0 || len(stored) > rafs.MaxChunkSize:
			return fmt.Errorf("chunk source delivered chunk %d with flags %#x and %d bytes", i, c.Flags, len(stored))
		}
		hdr = chunkapi.AppendOKFrame(hdr[:0], c.Flags, len(stored))
		if _, err := w.Write(hdr); err != nil {
			writeErr = err
			return err
		}
		if _, err := w.Write(stored); err != nil {
			writeErr = err
			return err
		}
		if err := rc.Flush(); err != nil {
			writeErr = err
			return err
		}
		next++
		return nil
	}
	if es, ok := s.chunks.(EarlyChunkSource); ok && v2 {
		err = es.ReadChunksEarly(r.Context(), ref, blob, chunks, deliver)
	} else {
		err = s.chunks.ReadChunks(r.Context(), ref, blob, chunks, deliver)
	}
	if err == nil && next != len(chunks) {
		err = fmt.Errorf("chunk source delivered %d of %d chunks", next, len(chunks))
	}
	if err == nil || writeErr != nil || r.Context().Err() != nil {
		return // done, or the client is gone
	}
	if next == len(chunks) {
		s.log.Debug("chunk source failed after delivering every chunk", "repo", repo, "blob", blob, "err", err)
		return
	}
	transient := registry.IsTransient(err)
	var ce *chunkapi.ChunkError
	if errors.As(err, &ce) {
		transient = ce.Transient
	}
	s.log.Debug("batch failed", "repo", repo, "blob", blob, "chunk", next, "transient", transient, "err", err)
	w.Write(chunkapi.AppendFailedFrame(nil, transient, err.Error()))
	rc.Flush()
}

// acceptsV2 reports whether Accept header values list
// chunkapi.ContentTypeChunksV2.
func acceptsV2(accept []string) bool {
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == chunkapi.ContentTypeChunksV2 {
				return true
			}
		}
	}
	return false
}
