package route

import (
	"errors"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
)

// ErrNoRoute is wrapped by a router's error when no scheduler could
// answer; the fetch engine then uses the parents it learnt recently and
// goes to the origin for the rest.
var ErrNoRoute = errors.New("route: no scheduler answered")

// Route is a router's answer to "where are these chunks of a blob?".
// Every chunk asked for is in exactly one of Parents[i].Chunks, Origin or
// Wait[i].Chunks.
type Route struct {
	// Parents hold the chunks, best first; their chunk sets are disjoint.
	Parents []Parent
	// Origin chunks are the asking peer's turn to fetch from the origin
	// registry; it then announces them, or abandons them on failure.
	Origin []uint32
	// Wait chunks are being fetched by other peers: ask again after
	// RetryAfter.
	Wait []Wait
}

// Parent is a peer to fetch chunks from.
type Parent struct {
	Info   lpeer.AddrInfo
	Chunks []uint32
}

// Wait is a group of chunks to ask about again later.
type Wait struct {
	Chunks     []uint32
	RetryAfter time.Duration
}

// Outcome is a requester's account of fetching an assignment from a
// parent.
type Outcome struct {
	Blob     rafs.Digest
	Bytes    int64         // stored bytes received and verified
	Duration time.Duration // from request to last byte
	OK       bool          // every assigned chunk arrived and verified
	// BadBytes: chunk BadChunk (an ordinal) failed verification.
	BadBytes bool
	BadChunk uint32
	// Missing are chunks the parent answered it does not hold.
	Missing []uint32
}
