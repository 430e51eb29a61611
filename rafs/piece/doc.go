// Package piece cuts plain (non-RAFS) blobs, such as ordinary OCI layers
// pulled through the registry mirror, into pieces that travel between
// peers like RAFS chunks.
//
// A piece is a fixed-size slice of the blob (the last one shorter), named
// by the sha256 of its bytes. A Table lists, for one blob, its size, the
// piece size and every piece's digest; it is made by the first peer that
// reads the whole blob from the origin (Builder), and published only after
// the whole blob matched its digest. Other peers fetch pieces from each
// other by digest, check each against the table and check the whole blob
// against its digest at the end.
//
// Chunks gives a table's pieces as raw rafs.Chunk values (ordinal = piece
// index, offset = index × piece size), so the node's chunk machinery
// (cache, exchange, holdings, scheduler, ranged origin reads) carries them
// unchanged. The table's encoding is documented in peer/PROTOCOL.md.
// The package is pure: no network, no disk.
package piece
