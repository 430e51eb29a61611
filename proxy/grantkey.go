package proxy

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// grantKeySize is the size of the grant key file.
const grantKeySize = 32

// loadGrantKey reads the grant key at path, creating it (0600, random)
// if it does not exist. Empty path: a random key for this process. A
// file of another size, not a regular file, or readable by group or
// others is refused.
func loadGrantKey(path string) ([]byte, error) {
	key := make([]byte, grantKeySize)
	if path == "" {
		rand.Read(key)
		return key, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return createGrantKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("grant key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, fmt.Errorf("grant key: %w", err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("grant key %s: not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("grant key %s: mode %v lets group or others read it (chmod 600)", path, fi.Mode().Perm())
	case fi.Size() != grantKeySize:
		return nil, fmt.Errorf("grant key %s: %d bytes, want %d", path, fi.Size(), grantKeySize)
	}
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, fmt.Errorf("grant key %s: %w", path, err)
	}
	return key, nil
}

// createGrantKey writes a new random key to path, atomically.
func createGrantKey(path string) ([]byte, error) {
	key := make([]byte, grantKeySize)
	rand.Read(key)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, key, 0o600); err != nil {
		return nil, fmt.Errorf("grant key: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		os.Remove(tmp)
		if errors.Is(err, os.ErrExist) { // another process made it first
			return loadGrantKey(path)
		}
		return nil, fmt.Errorf("grant key: %w", err)
	}
	os.Remove(tmp)
	return key, nil
}
