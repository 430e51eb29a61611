package chunkapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"damselfly/rafs"
	"damselfly/rafs/bufpool"
	"damselfly/rafs/registry"
)

// Client reads chunks through a proxy's batch endpoint. It splits
// large reads into batches within the endpoint's limits, verifies every
// chunk it receives and is safe for concurrent use.
type Client struct {
	url string // batch endpoint
	hc  *http.Client

	mu     sync.Mutex
	grants map[grantKey]string // the proxy's latest grant per blob
}

// grantKey names what a grant is for.
type grantKey struct {
	registry, repo string
	blob           rafs.Digest
}

// maxGrants bounds the grants a client keeps (one per blob read; a mount
// reads a few dozen).
const maxGrants = 4096

// NewClient returns a client of the proxy at baseURL
// ("http://127.0.0.1:7950"). hc nil means a client without an overall
// timeout: ReadChunks' ctx bounds each call.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{url: strings.TrimRight(baseURL, "/") + BatchPath, hc: hc, grants: map[grantKey]string{}}
}

// grant is the grant the proxy last gave for blob, or "".
func (cc *Client) grant(k grantKey) string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.grants[k]
}

// keepGrant remembers the grant of a response (HeaderGrant), which the
// proxy honours while the origin registry cannot be asked.
func (cc *Client) keepGrant(k grantKey, g string) {
	if g == "" || len(g) > 128 {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if _, ok := cc.grants[k]; !ok && len(cc.grants) >= maxGrants {
		clear(cc.grants)
	}
	cc.grants[k] = g
}

// ReadChunks reads chunks of blob through the peer. It asks for the v2 response
// (PROTOCOL.md), in which the peer sends each chunk it fetched as soon as
// it has verified it and puts it in its node cache meanwhile; older peers
// answer v1, having cached it first. Either way the peer caches every
// chunk it delivers, so a caller sharing its node cache need not. Each
// chunk is decoded and verified with rafs.DecodeChunk before deliver sees
// it; the c given to deliver carries the flags and stored size the proxy
// sent. Errors wrap a
// *ChunkError naming the first chunk not delivered: Transient for network
// failures, proxy or upstream 5xx/429 and a response cut short; not for
// upstream 4xx, a chunk that fails verification (the proxy sent bad
// bytes: try another source) or a malformed response. An error from
// deliver is returned as it is.
func (cc *Client) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	return cc.ReadChunksDecoded(ctx, up, blob, chunks, func(i int, c rafs.Chunk, stored, _ []byte) error {
		return deliver(i, c, stored)
	})
}

// ReadChunksDecoded is ReadChunks that also hands deliver plain, the
// chunk's decoded content (c.Size bytes) which it has checked against
// c.Digest, so that the caller need not decode and hash the chunk again.
// plain is made for this chunk alone: the caller may keep it (nobody
// else writes it), and may give it to rafs/bufpool, where it came from,
// once nothing uses it. stored is valid only during the call: the client
// reuses its buffer for the next chunk.
func (cc *Client) ReadChunksDecoded(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored, plain []byte) error) error {
	for i, c := range chunks {
		if err := checkChunk(c); err != nil {
			return &ChunkError{Index: i, Err: err}
		}
	}
	sp := storedPool.Get().(*[]byte)
	defer storedPool.Put(sp)
	stored := (*sp)[:0]
	defer func() { *sp = stored[:0] }()
	for start := 0; start < len(chunks); {
		end, total := start, uint64(0)
		for end < len(chunks) && end-start < MaxBatchChunks {
			n := uint64(max(chunks[end].CompressedSize, chunks[end].Size))
			if end > start && total+n > MaxBatchBytes {
				break
			}
			total += n
			end++
		}
		var err error
		if stored, err = cc.batch(ctx, up, blob, chunks, start, end, stored, deliver); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// storedPool holds the buffers stored bytes arrive in, one per
// ReadChunksDecoded call, grown to the largest chunk it read: a fresh one
// per call cost its allocation, its growth and the first touch of its
// pages on every batch.
var storedPool = sync.Pool{New: func() any { return new([]byte) }}

// checkChunk refuses a chunk the endpoint would refuse, so one bad chunk
// is named by its own index.
func checkChunk(c rafs.Chunk) error {
	switch {
	case c.CompressedSize == 0 || c.CompressedSize > rafs.MaxChunkSize || c.Size == 0 || c.Size > rafs.MaxChunkSize:
		return fmt.Errorf("chunk %s: sizes stored %d, size %d outside 1..%d", c.Digest, c.CompressedSize, c.Size, rafs.MaxChunkSize)
	case c.Flags&^KnownFlags != 0 || rafs.CheckChunkFlags(c.Flags) != nil:
		return fmt.Errorf("chunk %s: flags %#x: unknown, or two digest algorithms", c.Digest, c.Flags)
	case !c.Compressed() && c.CompressedSize != c.Size:
		return fmt.Errorf("chunk %s: raw chunk stored in %d bytes, size %d", c.Digest, c.CompressedSize, c.Size)
	case c.CompressedOffset > MaxBlobOffset:
		return fmt.Errorf("chunk %s: offset %d too large", c.Digest, c.CompressedOffset)
	}
	return nil
}

// batch reads chunks[start:end] in one request. stored is a scratch
// buffer, returned grown.
func (cc *Client) batch(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk, start, end int,
	stored []byte, deliver func(i int, c rafs.Chunk, stored, plain []byte) error) ([]byte, error) {
	req := Request{Repo: up.Repo, Blob: blob.String(), Chunks: make([]RequestChunk, 0, end-start)}
	for _, c := range chunks[start:end] {
		req.Chunks = append(req.Chunks, RequestChunk{
			Digest: c.Digest.String(), Offset: c.CompressedOffset, Stored: c.CompressedSize,
			Size: c.Size, Flags: c.Flags, Ordinal: c.Ordinal,
		})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return stored, &ChunkError{Index: start, Err: err}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, cc.url, bytes.NewReader(body))
	if err != nil {
		return stored, &ChunkError{Index: start, Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", ContentTypeChunksV2+", "+ContentTypeChunks)
	if up.Registry != "" {
		hreq.Header.Set(HeaderRegistry, up.Registry)
	}
	if up.Authorization != "" {
		hreq.Header.Set("Authorization", up.Authorization)
	}
	gk := grantKey{up.Registry, up.Repo, blob}
	if g := cc.grant(gk); g != "" {
		hreq.Header.Set(HeaderGrant, g)
	}
	resp, err := cc.hc.Do(hreq)
	if err != nil {
		return stored, &ChunkError{Index: start, Transient: ctx.Err() == nil, Err: fmt.Errorf("batch request: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorMessage))
		se := &registry.StatusError{Code: resp.StatusCode, Msg: strings.TrimSpace(string(msg))}
		return stored, &ChunkError{Index: start, Transient: se.Transient(), Err: fmt.Errorf("proxy: %w", se)}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != ContentTypeChunks && mt != ContentTypeChunksV2 {
		return stored, &ChunkError{Index: start, Err: fmt.Errorf("%w: content type %q", ErrProtocol, resp.Header.Get("Content-Type"))}
	}
	cc.keepGrant(gk, resp.Header.Get(HeaderGrant))
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	readErr := func(i int, err error) *ChunkError {
		transient := !errors.Is(err, ErrProtocol) && ctx.Err() == nil
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the response ended before this chunk
		}
		return &ChunkError{Index: i, Transient: transient, Err: fmt.Errorf("batch response: %w", err)}
	}
	for i := start; i < end; i++ {
		f, err := readFrameHead(br)
		if err != nil {
			return stored, readErr(i, err)
		}
		var p, dec []byte
		c := chunks[i]
		// The form is the proxy's to say; the digest algorithm is ours.
		c.Flags = c.Flags&^rafs.ChunkCompressed | f.flags&rafs.ChunkCompressed
		c.CompressedSize = f.length
		if !f.failed && c.HashesStored() {
			// Checked by its stored bytes (raw: its own plain form; a
			// blake3-stored chunk in either form), hashed as they
			// arrive, while still in the CPU's caches; into memory that
			// grows with what arrives when the scratch buffer is too
			// small.
			var err error
			if cap(stored) >= int(f.length) {
				p = stored[:f.length]
				err = rafs.ReadRawChunk(br, c, p)
			} else if p, err = rafs.ReadRawChunkGrowing(br, c, firstPayload); err == nil {
				stored = p
			}
			if errors.Is(err, rafs.ErrDigestMismatch) {
				return stored, &ChunkError{Index: i, Err: fmt.Errorf("from proxy: %w", err)}
			} else if err != nil {
				return stored, readErr(i, unexpected(err))
			}
			if c.Compressed() {
				// A blake3-stored frame, checked above: decoded
				// without hashing the content.
				dec = bufpool.Get(int(c.Size))
				if err := rafs.DecodeVerifiedStoredSpare(c, p, dec); err != nil {
					bufpool.Put(dec)
					return stored, &ChunkError{Index: i, Err: fmt.Errorf("from proxy: %w", err)}
				}
			} else {
				// deliver's to keep; raw chunks (incompressible data) are few
				dec = bufpool.Get(len(p))
				copy(dec, p)
			}
		} else {
			var err error
			if p, stored, err = readPayload(br, int(f.length), stored); err != nil {
				return stored, readErr(i, unexpected(err))
			}
			if f.failed {
				return stored, &ChunkError{Index: i, Transient: f.transient, Err: fmt.Errorf("proxy: %s", p)}
			}
			if !c.Compressed() {
				// Raw but of another size than the chunk's: refused.
				err = rafs.VerifyChunk(c, p, nil)
			} else {
				// Decoded into memory of its own, which deliver may
				// keep: made once the stored bytes are all in, for
				// c.Size, the caller's figure, not the proxy's.
				dec = bufpool.Get(int(c.Size))
				err = rafs.DecodeChunkSpare(c, p, dec)
			}
			if err != nil {
				return stored, &ChunkError{Index: i, Err: fmt.Errorf("from proxy: %w", err)}
			}
		}
		if err := deliver(i, c, p, dec); err != nil {
			return stored, err
		}
	}
	// Read on to the end of the body, which follows the last frame at
	// once, so that the connection goes back to the pool: a closed one
	// costs the next batch a handshake and a cold TCP window. Data after
	// the last frame breaks the protocol; the chunks are delivered anyway
	// and the connection is dropped.
	_, _ = br.Peek(1)
	return stored, nil
}
