// Package plain serves plain (non-RAFS) blobs, such as the gzip layers of
// ordinary OCI images pulled through the peer's mirror, from the node
// cache and other peers: Source implements proxy.BlobSource on top of the
// node's fetch engine (package fetch).
//
// A plain blob travels between peers as pieces (package rafs/piece): raw
// chunks of the blob, ordinal = piece index, which the fetch engine
// fetches, verifies, caches and announces like any chunk, under the
// blob's Key rather than its digest, so that piece ordinals never mix with
// the chunk ordinals of a RAFS blob with the same digest. What is
// particular to plain blobs is the piece table, the list of the pieces'
// digests, which only the whole blob's digest (the layer digest the
// manifest pins) can vouch for:
//
//   - source.go: Source. PieceTable finds the table to read a blob
//     through (the node's own, else one from a peer the Router names);
//     SettleTable keeps a peer's table once the whole blob read through
//     it matched, and otherwise forgets it with every piece read through
//     it and reports the peer; ReadPieces reads pieces through the engine;
//     RecordBlob cuts a blob streaming from the origin into pieces, and
//     holds and announces them once the whole blob matched.
//   - tables.go: the tables the node has checked (served to peers over
//     exchange.TableProtocolID), the tables from peers awaiting their
//     check, and the origin turns for a blob's first piece.
//   - store.go: the checked tables on disk, so that a restarted node
//     still serves the tables of the pieces it announces again.
package plain
