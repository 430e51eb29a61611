package chunkapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"damselfly/rafs"
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
	// MaxBlobOffset keeps offset+stored far from overflow.
	MaxBlobOffset = 1 << 52
)

// BatchPath is the batch chunk endpoint.
const BatchPath = "/api/v1/chunks"

// Request is the JSON body of a batch request.
type Request struct {
	Repo   string         `json:"repo"`
	Blob   string         `json:"blob"`
	Chunks []RequestChunk `json:"chunks"`
}

// RequestChunk describes one chunk of a Request, as the bootstrap does.
type RequestChunk struct {
	Digest  string `json:"digest"`
	Offset  uint64 `json:"offset"`
	Stored  uint32 `json:"stored"`
	Size    uint32 `json:"size"`
	Flags   uint32 `json:"flags"`
	Ordinal uint32 `json:"ordinal"`
}

// ParseRequest decodes and checks a batch request body: one JSON
// object with exactly the documented fields, a valid repository name and
// digests, 1..MaxBatchChunks chunks each within rafs.MaxChunkSize, only
// known flags (one digest algorithm at most), raw chunks whose stored and uncompressed sizes agree, and
// at most MaxBatchBytes in all.
func ParseRequest(data []byte) (repo string, blob rafs.Digest, chunks []rafs.Chunk, err error) {
	if len(data) > MaxBatchRequest {
		return "", blob, nil, fmt.Errorf("request body larger than %d bytes", MaxBatchRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var req Request
	if err := dec.Decode(&req); err != nil {
		return "", blob, nil, fmt.Errorf("request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", blob, nil, errors.New("request body: data after the JSON object")
	}
	if !registry.ValidRepo(req.Repo) {
		return "", blob, nil, fmt.Errorf("repo %s: not a repository name", registry.Quote(req.Repo))
	}
	if blob, err = rafs.ParseDigest(req.Blob); err != nil {
		return "", blob, nil, fmt.Errorf("blob %s: %w", registry.Quote(req.Blob), err)
	}
	if len(req.Chunks) == 0 || len(req.Chunks) > MaxBatchChunks {
		return "", blob, nil, fmt.Errorf("%d chunks: want 1..%d", len(req.Chunks), MaxBatchChunks)
	}
	chunks = make([]rafs.Chunk, len(req.Chunks))
	var total uint64
	for i, c := range req.Chunks {
		d, err := rafs.ParseDigest(c.Digest)
		if err != nil {
			return "", blob, nil, fmt.Errorf("chunk %d: digest %s: %w", i, registry.Quote(c.Digest), err)
		}
		switch {
		case c.Stored == 0 || c.Stored > rafs.MaxChunkSize || c.Size == 0 || c.Size > rafs.MaxChunkSize:
			return "", blob, nil, fmt.Errorf("chunk %d: sizes stored %d, size %d: want 1..%d", i, c.Stored, c.Size, rafs.MaxChunkSize)
		case c.Flags&^KnownFlags != 0:
			return "", blob, nil, fmt.Errorf("chunk %d: unknown flags %#x", i, c.Flags)
		case c.Flags&rafs.ChunkAlgoFlags == rafs.ChunkAlgoFlags:
			return "", blob, nil, fmt.Errorf("chunk %d: flags %#x name two digest algorithms", i, c.Flags)
		case c.Flags&rafs.ChunkCompressed == 0 && c.Stored != c.Size:
			return "", blob, nil, fmt.Errorf("chunk %d: raw chunk stored in %d bytes, size %d", i, c.Stored, c.Size)
		case c.Offset > MaxBlobOffset:
			return "", blob, nil, fmt.Errorf("chunk %d: offset %d beyond %d", i, c.Offset, uint64(MaxBlobOffset))
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
