// Package registry is the client of origin registries: ranged blob
// reads for chunks no peer holds (ReadRange), and pass-through of
// distribution API requests for the mirror (Forward).
//
// It authenticates the way registry clients do. A client's bearer token is
// forwarded as it is; Basic credentials (the client's, or the node's own
// from a docker config file when the client sent none) are traded for a
// bearer token when the registry challenges for one, and tokens are cached
// per registry, repository and credentials. Redirects to blob storage are
// followed without leaking Authorization to another host. Transient
// failures (network errors, 5xx, 429 with Retry-After) are retried with
// backoff; errors say which are permanent (StatusError, IsTransient).
//
// Files: config.go (Config), client.go (the authenticated request and
// retries), challenge.go, token.go and creds.go (authentication),
// read.go (ReadRange), forward.go (Forward), names.go (name grammar),
// errors.go.
package registry
