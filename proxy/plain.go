package proxy

import (
	"context"

	"damselfly/rafs"
	"damselfly/rafs/piece"
	"damselfly/rafs/registry"
)

// BlobSource serves plain (non-RAFS) blobs, such as ordinary OCI layers,
// from the node and its peers (WithBlobs): the blob is
// read as pieces (package piece), each a raw chunk that ReadChunks
// delivers verified against the piece table, and the whole is checked
// against the blob digest at the end. The peer's plain.Source implements it. Methods
// are safe for concurrent use.
type BlobSource interface {
	// PieceTable returns the table to read blob through, and whether the
	// node has itself checked the whole blob against it. Without
	// askPeers only such a table is returned; with it, a table from a
	// peer that holds the blob may be (verified false), and the caller
	// must then report with SettleTable whether the whole blob read
	// through it matched. nil means no table: read the blob from the
	// origin, through RecordBlob. It blocks at most until ctx is done.
	PieceTable(ctx context.Context, up registry.Ref, blob rafs.Digest, askPeers bool) (t *piece.Table, verified bool)
	// SettleTable says whether the whole of blob, read through a table
	// PieceTable returned unverified, matched the blob digest.
	SettleTable(blob rafs.Digest, t *piece.Table, matched bool)
	// ReadPieces reads pieces [first, last) of t as ChunkSource.ReadChunks
	// reads chunks: deliver gets each piece's bytes, in order, after they
	// matched the table's digest. A nil deliver only fetches the pieces
	// the node does not hold, so that a later read finds them.
	ReadPieces(ctx context.Context, up registry.Ref, t *piece.Table, first, last int,
		deliver func(i int, c rafs.Chunk, b []byte) error) error
	// RecordBlob returns a recorder for blob's bytes as they stream from
	// the origin, in order from the first.
	RecordBlob(up registry.Ref, blob rafs.Digest) piece.Recorder
}
