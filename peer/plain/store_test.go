package plain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"damselfly/rafs/piece"
)

func TestPieceTablesPersist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var tables []*piece.Table
	for i := range 3 {
		data := randBytes(uint64(50+i), 2*piece.MinSize+i)
		b, err := piece.NewBuilder(sha256.Sum256(data), piece.MinSize, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		tb, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tb)
	}
	p := newTableSet(newTableStore(dir, slog.New(slog.DiscardHandler)))
	for _, tb := range tables {
		p.keep(tb)
	}
	p.forget(tables[2].Blob)
	tdir := filepath.Join(dir, "piece-tables")
	// A damaged file and a file holding another blob's table are dropped.
	damaged := filepath.Join(tdir, hex.EncodeToString(tables[1].Blob[:]))
	b, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 1
	os.WriteFile(damaged, b, 0o600)
	wrong := filepath.Join(tdir, hex.EncodeToString(tables[2].Blob[:]))
	os.WriteFile(wrong, tables[0].Encode(), 0o600)
	os.WriteFile(filepath.Join(tdir, "stranger"), []byte("x"), 0o600)

	loaded, err := newTableStore(dir, slog.New(slog.DiscardHandler)).load()
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 1 || !bytes.Equal(loaded[0].Encode(), tables[0].Encode()) {
		t.Fatalf("loaded %d tables, want only the first", len(loaded))
	}
	for _, f := range []string{damaged, wrong} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s: still there after a failed load (%v)", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tdir, "stranger")); err != nil {
		t.Errorf("a stranger's file was touched: %v", err)
	}
	// A partial table (a live pull's) on disk is never taken as checked.
	part := &piece.Table{Blob: tables[1].Blob, Size: tables[1].Size, PieceSize: tables[1].PieceSize, Digests: slices.Clone(tables[1].Digests)}
	part.Digests[0] = [32]byte{}
	os.WriteFile(damaged, part.Encode(), 0o600)
	if loaded, err := newTableStore(dir, slog.New(slog.DiscardHandler)).load(); err != nil || len(loaded) != 1 {
		t.Fatalf("load with a partial table on disk: %d tables, %v; want only the first", len(loaded), err)
	}
	if _, err := os.Stat(damaged); !os.IsNotExist(err) {
		t.Errorf("a partial table file was kept (%v)", err)
	}
	// Without a directory nothing is written.
	if got, err := newTableStore("", nil).load(); err != nil || got != nil {
		t.Fatalf("load without a dir: %v, %v", got, err)
	}
}

// randBytes returns n pseudo-random bytes from seed.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
