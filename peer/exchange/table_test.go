package exchange

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/piece"
)

func testTable(t testing.TB, size int) *piece.Table {
	t.Helper()
	data := bytes.Repeat([]byte("damselfly"), size/9+1)[:size]
	b, err := piece.NewBuilder(sha256.Sum256(data), piece.MinSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(data)
	tb, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestFetchTable(t *testing.T) {
	srv, cli := pair(t)
	good := testTable(t, 3*piece.MinSize+5)
	other := testTable(t, 2*piece.MinSize)
	liar := rafs.Digest{7} // the server answers other's table for it
	s := NewTableServer(srv, func(blob rafs.Digest) ([]byte, bool) {
		switch blob {
		case good.Blob:
			return good.Encode(), true
		case liar:
			return other.Encode(), true
		}
		return nil, false
	}, nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := FetchTable(ctx, cli, srv.ID(), good.Blob)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Encode(), good.Encode()) {
		t.Fatal("fetched table differs from the one served")
	}
	if _, err := FetchTable(ctx, cli, srv.ID(), rafs.Digest{1}); !errors.Is(err, ErrNoTable) {
		t.Fatalf("unknown blob: got %v, want ErrNoTable", err)
	}
	if _, err := FetchTable(ctx, cli, srv.ID(), liar); !errors.Is(err, ErrProtocol) {
		t.Fatalf("table of another blob: got %v, want ErrProtocol", err)
	}
	s.Close()
	if _, err := FetchTable(ctx, cli, srv.ID(), good.Blob); err == nil {
		t.Fatal("a closed server still answered")
	}
}

// FuzzReadTable feeds arbitrary answers to the table client's decoder: it
// must not panic, and a table it accepts names the blob asked for.
func FuzzReadTable(f *testing.F) {
	tb := testTable(f, 2*piece.MinSize+1)
	good := append(appendTableHead(nil, tableOK, len(tb.Encode())), tb.Encode()...)
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(appendTableHead(nil, tableNotFound, 0))
	f.Add(appendTableHead(nil, tableOK, 1<<30))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readTable(bytes.NewReader(data), tb.Blob, func() error { return nil })
		if err != nil {
			return
		}
		if got.Blob != tb.Blob || got.Check() != nil {
			t.Fatalf("accepted table %+v for blob %s", got, tb.Blob)
		}
	})
}
