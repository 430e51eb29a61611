package piece

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"damselfly/rafs"
)

func blobOf(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// build makes the table of data, writing it in writes of step bytes.
func build(t testing.TB, data []byte, pieceSize int64, step int) (*Table, [][]byte) {
	t.Helper()
	var pieces [][]byte
	b, err := NewBuilder(sha256.Sum256(data), pieceSize, func(i int, d rafs.Digest, p []byte) {
		if i != len(pieces) {
			t.Fatalf("piece %d handed over after %d", i, len(pieces))
		}
		if sha256.Sum256(p) != d {
			t.Fatalf("piece %d: digest does not match its bytes", i)
		}
		pieces = append(pieces, bytes.Clone(p))
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := data; len(p) > 0; {
		k := min(step, len(p))
		if _, err := b.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	tb, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return tb, pieces
}

func TestBuilderCutsAndRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		size, step int
		wantPieces int
	}{
		{"one short piece", 1000, 7, 1},
		{"exactly one", MinSize, 4096, 1},
		{"two, last short", MinSize + 1, MinSize, 2},
		{"several, odd writes", 5*MinSize + 123, 9999, 6},
		{"one big write", 3 * MinSize, 3 * MinSize, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := blobOf(tc.size, uint64(tc.size))
			tb, pieces := build(t, data, MinSize, tc.step)
			if tb.Count() != tc.wantPieces || len(pieces) != tc.wantPieces {
				t.Fatalf("got %d pieces (%d handed over), want %d", tb.Count(), len(pieces), tc.wantPieces)
			}
			if tb.Size != int64(tc.size) {
				t.Fatalf("got size %d, want %d", tb.Size, tc.size)
			}
			var joined []byte
			for i, p := range pieces {
				c := tb.Chunk(i)
				if c.Ordinal != uint32(i) || int(c.Size) != len(p) || c.CompressedSize != c.Size || c.Compressed() ||
					!bytes.Equal(data[c.CompressedOffset:c.CompressedOffset+uint64(c.Size)], p) {
					t.Fatalf("piece %d: chunk %+v does not describe its bytes", i, c)
				}
				joined = append(joined, p...)
			}
			if !bytes.Equal(joined, data) {
				t.Fatal("pieces do not join to the blob")
			}
			got, err := Decode(tb.Encode())
			if err != nil {
				t.Fatal(err)
			}
			if got.Blob != tb.Blob || got.Size != tb.Size || got.PieceSize != tb.PieceSize || !equalDigests(got.Digests, tb.Digests) {
				t.Fatalf("decoded %+v, want %+v", got, tb)
			}
		})
	}
}

func equalDigests(a, b []rafs.Digest) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBuilderRefusesWrongBytes(t *testing.T) {
	t.Parallel()
	data := blobOf(3*MinSize, 3)
	b, err := NewBuilder(sha256.Sum256(data), MinSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	data[5] ^= 1
	b.Write(data)
	if _, err := b.Finish(); !errors.Is(err, ErrMismatch) {
		t.Fatalf("got %v, want ErrMismatch", err)
	}
	empty, _ := NewBuilder(sha256.Sum256(nil), MinSize, nil)
	if _, err := empty.Finish(); !errors.Is(err, ErrMismatch) {
		t.Fatalf("empty blob: got %v, want ErrMismatch", err)
	}
	if _, err := NewBuilder(rafs.Digest{}, MinSize-1, nil); err == nil {
		t.Fatal("a piece size below MinSize was accepted")
	}
}

func TestCovering(t *testing.T) {
	t.Parallel()
	tb := &Table{Size: 10*MinSize + 5, PieceSize: MinSize, Digests: make([]rafs.Digest, 11)}
	for _, tc := range []struct {
		off, end    int64
		first, last int
	}{
		{0, 1, 0, 1},
		{0, tb.Size, 0, 11},
		{MinSize - 1, MinSize + 1, 0, 2},
		{MinSize, 2 * MinSize, 1, 2},
		{tb.Size - 1, tb.Size, 10, 11},
	} {
		if f, l := tb.Covering(tc.off, tc.end); f != tc.first || l != tc.last {
			t.Errorf("Covering(%d, %d) = %d, %d; want %d, %d", tc.off, tc.end, f, l, tc.first, tc.last)
		}
	}
}

func TestDecodeRefusesBrokenTables(t *testing.T) {
	t.Parallel()
	tb, _ := build(t, blobOf(2*MinSize+1, 9), MinSize, MinSize)
	good := tb.Encode()
	recrc := func(b []byte) []byte { // fix the CRC so the field check is what fails
		body := b[:len(b)-4]
		c := bytes.Clone(b)
		putCRC(c[len(body):], body)
		return c
	}
	mut := func(off int, v byte) []byte {
		b := bytes.Clone(good)
		b[off] = v
		return recrc(b)
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"short":          good[:headerSize],
		"bad magic":      mut(0, 'X'),
		"version":        mut(8, 2),
		"flags":          mut(10, 2),
		"not partial":    recrc(append(append(bytes.Clone(good[:headerSize]), make([]byte, 32)...), good[headerSize+32:]...)),
		"piece too big":  mut(15, 0x10),
		"size too small": recrc(append(append(bytes.Clone(good[:16]), make([]byte, 8)...), good[24:]...)),
		"count":          mut(56, 4),
		"crc":            append(bytes.Clone(good[:len(good)-1]), good[len(good)-1]^1),
		"trailing byte":  recrc(append(bytes.Clone(good), 0)),
	} {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", name, err)
		}
	}
}

// TestPartialTable: a table with unknown digests is flagged partial and
// round-trips; a complete one is not flagged.
func TestPartialTable(t *testing.T) {
	t.Parallel()
	tb, _ := build(t, blobOf(3*MinSize+1, 11), MinSize, MinSize)
	if !tb.Complete() || tb.Encode()[10] != 0 {
		t.Fatal("a complete table is flagged partial")
	}
	part := &Table{Blob: tb.Blob, Size: tb.Size, PieceSize: tb.PieceSize, Digests: slices.Clone(tb.Digests)}
	part.Digests[1] = rafs.Digest{}
	enc := part.Encode()
	if enc[10] != flagPartial || part.Complete() || part.Known(1) || !part.Known(2) {
		t.Fatalf("partial table: flags %d, complete %v, known(1) %v", enc[10], part.Complete(), part.Known(1))
	}
	got, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Digests, part.Digests) {
		t.Fatal("partial table changed in a round trip")
	}
}
