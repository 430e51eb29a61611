// Package registry is the project's client of origin registries: ranged
// blob reads (ReadRange, for the peer's chunks no other peer holds, and
// ReadRangeOnce, for the mount's own retry loop), whole blobs streamed
// (OpenBlob, for rafs/transport's readers of images), authorisation checks
// (Check, Ping) and pass-through of distribution API requests for the
// mirror (Forward).
//
// Authentication is go-containerregistry's transport (ping, challenge,
// token exchange, renewal on a 401 with a challenge), one session per
// registry, repository and credentials, kept in a bounded cache. The
// credentials are the client's (a bearer token is sent as it is; Basic
// credentials are sent or traded for a token), else the node's where
// they are lent (Config.LendNodeCredentials, from the docker config
// file, or every registry with WithKeychain), else none. Below
// go-containerregistry sits the project's policy, for every request
// whoever chose its URL: https anywhere, http only to loopback and
// PlainHTTP hosts, never a link-local or metadata address (policy.go,
// NewTransport). Redirects to blob storage are followed without leaking
// Authorization to another host. Transient failures (network errors,
// 5xx, 429 with Retry-After) are retried with the project's backoff
// (rafs/backoff); errors say which are permanent (StatusError,
// IsTransient).
//
// Files: config.go (Config), client.go (the authenticated request and
// retries), session.go (go-containerregistry sessions), creds.go (the
// node's docker config), policy.go (origin policy, base transport),
// read.go (ReadRange), blob.go (OpenBlob, Authenticate), check.go
// (Check, Ping), forward.go (Forward), names.go (name grammar),
// challenge.go (the challenge grammar), errors.go.
package registry
