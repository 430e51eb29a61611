package proxy

import (
	"bytes"
	"encoding/json"
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

// Batch request limits, checked before any chunk is fetched.
const (
	// MaxBatchRequest bounds the JSON body.
	MaxBatchRequest = 512 << 10
	// MaxBatchChunks bounds the chunks of one request.
	MaxBatchChunks = 1024
	// MaxBatchBytes bounds the sum over a request's chunks of
	// max(stored, size).
	MaxBatchBytes = 64 << 20
	// maxBlobOffset keeps offset+stored far from overflow.
	maxBlobOffset = 1 << 52
)

// BatchPath is the batch chunk endpoint.
const BatchPath = "/api/v1/chunks"

// batchRequest is the JSON body of a batch request.
type batchRequest struct {
	Repo   string       `json:"repo"`
	Blob   string       `json:"blob"`
	Chunks []batchChunk `json:"chunks"`
}

type batchChunk struct {
	Digest  string `json:"digest"`
	Offset  uint64 `json:"offset"`
	Stored  uint32 `json:"stored"`
	Size    uint32 `json:"size"`
	Flags   uint32 `json:"flags"`
	Ordinal uint32 `json:"ordinal"`
}

// parseBatchRequest decodes and checks a batch request body: one JSON
// object with exactly the documented fields, a valid repository name and
// digests, 1..MaxBatchChunks chunks each within rafs.MaxChunkSize, only
// known flags, raw chunks whose stored and uncompressed sizes agree, and
// at most MaxBatchBytes in all.
func parseBatchRequest(data []byte) (repo string, blob rafs.Digest, chunks []rafs.Chunk, err error) {
	if len(data) > MaxBatchRequest {
		return "", blob, nil, fmt.Errorf("request body larger than %d bytes", MaxBatchRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var req batchRequest
	if err := dec.Decode(&req); err != nil {
		return "", blob, nil, fmt.Errorf("request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", blob, nil, errors.New("request body: data after the JSON object")
	}
	if !registry.ValidRepo(req.Repo) {
		return "", blob, nil, fmt.Errorf("repo %s: not a repository name", quote(req.Repo))
	}
	if blob, err = rafs.ParseDigest(req.Blob); err != nil {
		return "", blob, nil, fmt.Errorf("blob %s: %w", quote(req.Blob), err)
	}
	if len(req.Chunks) == 0 || len(req.Chunks) > MaxBatchChunks {
		return "", blob, nil, fmt.Errorf("%d chunks: want 1..%d", len(req.Chunks), MaxBatchChunks)
	}
	chunks = make([]rafs.Chunk, len(req.Chunks))
	var total uint64
	for i, c := range req.Chunks {
		d, err := rafs.ParseDigest(c.Digest)
		if err != nil {
			return "", blob, nil, fmt.Errorf("chunk %d: digest %s: %w", i, quote(c.Digest), err)
		}
		switch {
		case c.Stored == 0 || c.Stored > rafs.MaxChunkSize || c.Size == 0 || c.Size > rafs.MaxChunkSize:
			return "", blob, nil, fmt.Errorf("chunk %d: sizes stored %d, size %d: want 1..%d", i, c.Stored, c.Size, rafs.MaxChunkSize)
		case c.Flags&^knownFlags != 0:
			return "", blob, nil, fmt.Errorf("chunk %d: unknown flags %#x", i, c.Flags)
		case c.Flags&rafs.ChunkCompressed == 0 && c.Stored != c.Size:
			return "", blob, nil, fmt.Errorf("chunk %d: raw chunk stored in %d bytes, size %d", i, c.Stored, c.Size)
		case c.Offset > maxBlobOffset:
			return "", blob, nil, fmt.Errorf("chunk %d: offset %d beyond %d", i, c.Offset, uint64(maxBlobOffset))
		}
		total += uint64(max(c.Stored, c.Size))
		if total > MaxBatchBytes {
			return "", blob, nil, fmt.Errorf("chunks add up to more than %d bytes", MaxBatchBytes)
		}
		chunks[i] = rafs.Chunk{
			Digest: d, Flags: c.Flags, CompressedOffset: c.Offset,
			CompressedSize: c.Stored, Size: c.Size, Ordinal: c.Ordinal,
		}
	}
	return req.Repo, blob, chunks, nil
}

// serveChunks is the batch endpoint: it checks the request, answers 200
// and streams one frame per chunk as the ChunkSource delivers it,
// flushing each, and a failed frame for the first chunk it cannot get.
// To a client that accepts ContentTypeChunksV2, an EarlyChunkSource's
// chunks go out as soon as they are verified.
func (s *Server) serveChunks(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchRequest))
	if err != nil {
		http.Error(w, "batch request: "+err.Error(), http.StatusBadRequest)
		return
	}
	repo, blob, chunks, err := parseBatchRequest(data)
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
	d := s.gate.authorize(r.Context(), ref, "blobs", blob.String(), r.Header.Get(HeaderGrant))
	s.m.authorize(d)
	if !d.allowed {
		code, msg := refusal(d, reg)
		s.log.Info("batch request refused", "registry", reg, "repo", repo, "blob", blob, "why", msg)
		http.Error(w, "batch request: "+msg, code)
		return
	}
	w.Header().Set(HeaderGrant, s.gate.grantFor(ref, "blobs", blob.String()))

	v2 := acceptsV2(r.Header.Values("Accept"))
	rc := http.NewResponseController(w)
	if v2 {
		w.Header().Set("Content-Type", ContentTypeChunksV2)
	} else {
		w.Header().Set("Content-Type", ContentTypeChunks)
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
		case c.Flags&^knownFlags != 0 || len(stored) == 0 || len(stored) > rafs.MaxChunkSize:
			return fmt.Errorf("chunk source delivered chunk %d with flags %#x and %d bytes", i, c.Flags, len(stored))
		}
		hdr = appendOKFrame(hdr[:0], c.Flags, len(stored))
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
	w.Write(appendFailedFrame(nil, transient, err.Error()))
	rc.Flush()
}

// acceptsV2 reports whether Accept header values list
// ContentTypeChunksV2.
func acceptsV2(accept []string) bool {
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == ContentTypeChunksV2 {
				return true
			}
		}
	}
	return false
}
