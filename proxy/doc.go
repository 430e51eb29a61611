// Package proxy is the HTTP face of a damselfly peer: the endpoint that
// registry clients and mount daemons on the node point at.
//
// It serves three things:
//
//   - An OCI distribution API mirror (/v2/): containerd (hosts.toml),
//     skopeo and nydusd-style daemons use it unchanged. Manifests, tags,
//     referrers and blobs pass through to the origin registry with the
//     client's credentials (package rafs/registry does the talking), except
//     that a blob GET is served from peers when the node can (a BlobSource
//     given with WithBlobs,
//     mirror_blob.go: plain blobs in pieces checked against a piece table
//     and in full against the blob digest); the origin
//     comes from containerd's ?ns= parameter, the X-Damselfly-Registry (or
//     X-Dragonfly-Registry) header, or the configured default. While
//     the origin cannot be reached, manifests it served before are
//     answered from the node's manifest store (WithManifests), or what
//     it lacks from other peers (WithManifestPeers), to the
//     clients it allowed.
//   - The batch chunk endpoint (POST /api/v1/chunks): a mount daemon asks
//     for many chunks of one RAFS blob at once and reads them back as a
//     stream of frames, each sent as soon as the ChunkSource (the peer's
//     node: cache, other peers, origin) delivers it; an EarlyChunkSource's
//     chunks go out once verified, while the source caches them.
//     PROTOCOL.md documents the wire format byte by byte; package
//     rafs/chunkapi holds that format (requests, frames, errors) and the
//     client, which verifies every chunk it receives, so that readers
//     need not import this server.
//   - /healthz and /metrics (Prometheus).
//
// Files: config.go (Config), server.go (listeners and lifetime), mirror.go
// (/v2/), plain.go and mirror_blob.go (plain blobs from peers),
// manifests.go and outage.go (manifests and blob HEADs through an origin
// outage, from the store in rafs/manifests), batch.go
// (the batch handler), grants.go (the grants handler), authz.go (who may
// read what), metrics.go.
package proxy
