package transport

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeJSONAtomic replaces path with the indented JSON encoding of v.
func writeJSONAtomic(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "   ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(raw)
		return err
	})
}

// writeFileAtomic replaces path with what write produces, by way of a
// temporary file in the same directory, so a crash or an error never leaves
// a truncated file behind. The result has mode 0644.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
