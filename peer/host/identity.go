package host

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// maxSecretFile bounds what is read from a key file before parsing it.
const maxSecretFile = 4 << 10

// loadOrCreateIdentity returns the private key in path, creating a new
// Ed25519 key there first if the file does not exist. The file holds the
// key in libp2p's protobuf encoding (crypto.MarshalPrivateKey).
//
// Creation is atomic and never replaces a file: the key is written to a
// temp file that is then hard-linked to path, so two processes starting at
// once both end up with whichever key was linked first.
func loadOrCreateIdentity(path string) (crypto.PrivKey, error) {
	b, err := readSecretFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createIdentity(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		b, err = readSecretFile(path)
	}
	if err != nil {
		return nil, err
	}
	k, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity file %s: %w", path, err)
	}
	return k, nil
}

func createIdentity(path string) error {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate identity: %w", err)
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	return createSecretFile(path, b)
}

// createSecretFile writes b to path, mode 0600, unless path exists: then
// it returns an error wrapping fs.ErrExist.
func createSecretFile(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	// CreateTemp uses 0600 already; Chmod makes that independent of it.
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// readSecretFile reads a small file that holds a secret, refusing one that
// is not a regular file, is too large, or that group or others may access.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %04o gives group or others access to a secret; chmod 600 it", path, perm)
	}
	if fi.Size() > maxSecretFile {
		return nil, fmt.Errorf("%s: %d bytes, more than a key file holds (%d)", path, fi.Size(), maxSecretFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s: more than a key file holds (%d bytes)", path, maxSecretFile)
	}
	return b, nil
}
