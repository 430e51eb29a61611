// Package backend is where the mount daemon's chunk misses go: it reads
// stored blob bytes by range from the image's origin, in the shape of
// nydusd's backend section.
//
// A [Backend] of type "registry" sends one ranged GET per read, to the
// local peer's registry mirror (the proxy) while that answers its health
// check, and straight to the registry otherwise (when fallback is on).
// Transient failures are retried with exponential backoff until a
// deadline, so a registry restart under a job that runs for days is a
// pause, not EIO. A Backend of type "oci" reads an OCI image layout
// directory.
//
// The parts, one file each:
//
//   - config.go: [Config], its defaults and Validate.
//   - read.go: the retry loop, the choice of source per attempt, and how
//     each failure is classified (retry, re-authenticate, fall back, fail).
//   - clock.go: the injected [Clock] and the wait before a retry (the
//     project's backoff, rafs/backoff, held to the deadline).
//   - response.go: turning one HTTP response into exactly the requested
//     bytes, or an error saying why not.
//   - origin.go: the registry, read through the project's registry client
//     (rafs/registry: go-containerregistry's handshake, done lazily and
//     again after a 401), and its errors mapped to this package's.
//   - proxy.go: the proxy's health state and the goroutine that probes it.
//   - chunks.go: reading a run of chunks by digest, first checked by
//     rafs/runs (Check: one blob, no gap, within its size and 64 MiB):
//     through the peer's batch endpoint (so the peer can verify before
//     caching or serving), or as one byte range from the registry, an OCI
//     layout or a plain mirror without the endpoint.
//   - oci.go: the OCI layout reader.
//   - stats.go and errors.go: counters, sentinel and typed errors.
package backend
