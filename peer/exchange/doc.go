// Package exchange is the chunk exchange between peers: a request/response
// protocol on libp2p streams (ProtocolID, documented frame by frame in
// peer/PROTOCOL.md) through which a peer asks another for chunks of a blob
// by digest and gets their stored bytes back.
//
// One stream carries one request: a blob digest and a batch of chunks,
// each described as the bootstrap describes it (offset, stored length,
// size, flags, digest). The server looks every chunk up in its node cache
// by digest, and never serves byte ranges: a requester gets only chunks it
// can name. The answer streams, per chunk in request order, a status and
// the stored bytes.
//
// The parts:
//
//   - wire.go: frame layouts, limits, encoding and the checking decoders.
//   - server.go: Server, which registers the stream handler, enforces the
//     per-peer and total stream limits, deadlines and the upload limit,
//     and answers from a Store (the node cache).
//   - limiter.go: the upload token bucket, shared fairly between peers.
//   - client.go: Fetch, which sends a request, verifies every chunk with
//     rafs.DecodeChunk before handing it on, and reports missing and bad
//     chunks.
//
// Trust: every chunk is verified by the requester before use; a peer that
// sends bytes that do not verify, or breaks the protocol, is reported by
// Fetch's error (ErrBadChunk, ErrProtocol) so that the caller can report
// and ban it. The server also checks each chunk's digest before sending
// it unless ServerConfig.NoVerify.
package exchange
