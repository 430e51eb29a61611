package chunkapi

// Request headers of the peer's HTTP endpoints (the batch and grants
// endpoints here, and the registry mirror in package proxy).
const (
	// HeaderRegistry selects the origin registry of a request by its
	// base URL, "https://host[:port]"; without it the peer's default
	// registry is meant.
	HeaderRegistry = "X-Damselfly-Registry"
	// HeaderGrant carries a grant: the peer's word, on a batch response,
	// that the origin allowed this client to read the blob; sent back
	// on later batch requests, it lets the peer serve the blob while the
	// origin cannot be asked (proxy/PROTOCOL.md, "Who may read what").
	HeaderGrant = "X-Damselfly-Grant"
)
