package plain

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"damselfly/rafs"
	"damselfly/rafs/piece"
)

// The piece tables this node has checked are kept, when HoldingsDir is
// set, one file per blob under HoldingsDir/piece-tables, named by the
// blob digest's hex and holding the table's encoding (peer/PROTOCOL.md),
// so that after a restart the node still serves the tables of the pieces
// it announces again. A file that fails to decode, or names another blob,
// is deleted with a warning.

// tableStore persists tables; the zero dir keeps nothing.
type tableStore struct {
	dir string
	log *slog.Logger
}

func newTableStore(holdingsDir string, log *slog.Logger) tableStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if holdingsDir == "" {
		return tableStore{log: log}
	}
	return tableStore{dir: filepath.Join(holdingsDir, "piece-tables"), log: log}
}

// load returns up to maxTables tables from the directory.
func (s tableStore) load() ([]*piece.Table, error) {
	if s.dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("piece tables dir: %w", err)
	}
	var out []*piece.Table
	for _, e := range ents {
		raw, err := hex.DecodeString(e.Name())
		if err != nil || len(raw) != len(rafs.Digest{}) || !e.Type().IsRegular() {
			continue // temp files and strangers
		}
		if len(out) == maxTables {
			s.log.Warn("too many piece tables; ignoring the rest", "dir", s.dir, "limit", maxTables)
			break
		}
		p := filepath.Join(s.dir, e.Name())
		t, err := readTableFile(p, rafs.Digest(raw))
		if err != nil {
			s.log.Warn("ignoring piece table file", "path", p, "err", err)
			_ = os.Remove(p)
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func readTableFile(p string, blob rafs.Digest) (*piece.Table, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > piece.MaxEncodedSize {
		return nil, fmt.Errorf("%w: not a regular file of at most %d bytes", piece.ErrCorrupt, piece.MaxEncodedSize)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	t, err := piece.Decode(b)
	if err != nil {
		return nil, err
	}
	if t.Blob != blob {
		return nil, fmt.Errorf("%w: table of %s in the file of %s", piece.ErrCorrupt, t.Blob, blob)
	}
	if !t.Complete() {
		return nil, fmt.Errorf("%w: a partial table, never kept", piece.ErrCorrupt)
	}
	return t, nil
}

// write stores enc as the table of blob, atomically.
func (s tableStore) write(blob rafs.Digest, enc []byte) {
	if s.dir == "" {
		return
	}
	err := os.MkdirAll(s.dir, 0o700)
	var f *os.File
	if err == nil {
		f, err = os.CreateTemp(s.dir, ".tmp-")
	}
	if err == nil {
		_, err = f.Write(enc)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), filepath.Join(s.dir, hex.EncodeToString(blob[:])))
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}
	if err != nil {
		s.log.Warn("writing a piece table", "blob", blob, "err", err)
	}
}

func (s tableStore) remove(blob rafs.Digest) {
	if s.dir == "" {
		return
	}
	err := os.Remove(filepath.Join(s.dir, hex.EncodeToString(blob[:])))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("removing a piece table", "blob", blob, "err", err)
	}
}
