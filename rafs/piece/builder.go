package piece

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"

	"damselfly/rafs"
)

// ErrMismatch is wrapped by Builder.Finish when the bytes written are not
// the blob they were said to be.
var ErrMismatch = errors.New("blob does not match its digest")

// Builder makes the table of a blob from its bytes, written in order. It
// hashes the whole blob and each piece, and hands every completed piece
// to the callback given to NewBuilder, so the caller may keep it; the
// pieces belong to the blob only if Finish succeeds. Not safe for
// concurrent use.
type Builder struct {
	t       Table
	whole   hash.Hash
	buf     []byte // the piece being filled
	onPiece func(i int, d rafs.Digest, b []byte)
	err     error
}

// NewBuilder returns a Builder for blob, cut into pieces of pieceSize
// (MinSize..MaxSize). onPiece, if not nil, is called with each piece, its
// digest and its bytes (valid only during the call) as soon as it is
// complete.
func NewBuilder(blob rafs.Digest, pieceSize int64, onPiece func(i int, d rafs.Digest, b []byte)) (*Builder, error) {
	if pieceSize < MinSize || pieceSize > MaxSize {
		return nil, fmt.Errorf("piece size %d outside %d..%d", pieceSize, MinSize, MaxSize)
	}
	return &Builder{
		t:       Table{Blob: blob, PieceSize: pieceSize},
		whole:   sha256.New(),
		buf:     make([]byte, 0, pieceSize),
		onPiece: onPiece,
	}, nil
}

// Write takes the next bytes of the blob. It fails once the blob would
// exceed MaxPieces pieces.
func (b *Builder) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n := len(p)
	b.whole.Write(p)
	for len(p) > 0 {
		k := min(len(p), int(b.t.PieceSize)-len(b.buf))
		b.buf = append(b.buf, p[:k]...)
		p = p[k:]
		b.t.Size += int64(k)
		if len(b.buf) == int(b.t.PieceSize) {
			if err := b.cut(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (b *Builder) cut() error {
	if len(b.t.Digests) == MaxPieces {
		b.err = fmt.Errorf("blob %s: more than %d pieces", b.t.Blob, MaxPieces)
		return b.err
	}
	d := rafs.Digest(sha256.Sum256(b.buf))
	if b.onPiece != nil {
		b.onPiece(len(b.t.Digests), d, b.buf)
	}
	b.t.Digests = append(b.t.Digests, d)
	b.buf = b.buf[:0]
	return nil
}

// Finish ends the blob and returns its table, or an error wrapping
// ErrMismatch if the bytes written do not hash to the blob digest (or
// there were none).
func (b *Builder) Finish() (*Table, error) {
	if b.err != nil {
		return nil, b.err
	}
	if len(b.buf) > 0 {
		if err := b.cut(); err != nil {
			return nil, err
		}
	}
	if got := rafs.Digest(b.whole.Sum(nil)); got != b.t.Blob {
		return nil, fmt.Errorf("%w: got %s, want %s", ErrMismatch, got, b.t.Blob)
	}
	if b.t.Size == 0 {
		return nil, fmt.Errorf("blob %s is empty: %w", b.t.Blob, ErrMismatch)
	}
	t := b.t
	return &t, t.Check()
}
