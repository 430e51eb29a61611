package cache

import (
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"damselfly/rafs"
)

// Names inside Config.Dir; CACHE.md describes them.
const (
	chunksDirName = "chunks"
	lockFileName  = "lock"
	// tempPrefix starts every temp file name, followed by the entry's hex
	// digest, a dash and a random suffix. Scans skip such names and delete
	// them once they are older than staleTempAge.
	tempPrefix = ".tmp-"
)

// paths names the files of one cache directory.
type paths struct {
	root   string // Config.Dir
	chunks string // root/chunks
	lock   string // root/lock
}

func newPaths(root string) paths {
	return paths{
		root:   root,
		chunks: filepath.Join(root, chunksDirName),
		lock:   filepath.Join(root, lockFileName),
	}
}

// shard is the directory that holds d's entry: chunks/<first 2 hex digits>.
func (p paths) shard(d rafs.Digest) string {
	return p.chunks + "/" + hex.EncodeToString(d[:1])
}

// entry is d's entry file: chunks/<2 hex>/<64 hex>.
func (p paths) entry(d rafs.Digest) string {
	var h [64]byte
	hex.Encode(h[:], d[:])
	return p.chunks + "/" + string(h[:2]) + "/" + string(h[:])
}

// parseEntryName returns the digest an entry file name spells: 64 lower
// case hex digits.
func parseEntryName(name string) (rafs.Digest, bool) {
	var d rafs.Digest
	if len(name) != 64 || !isLowerHex(name) {
		return d, false
	}
	_, err := hex.Decode(d[:], []byte(name))
	return d, err == nil
}

// isShardName reports whether name is a shard directory name: two lower
// case hex digits.
func isShardName(name string) bool { return len(name) == 2 && isLowerHex(name) }

func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// makeShards creates the 256 shard directories that do not exist yet.
// Creating each on first use put a directory creation, contended by
// concurrent writers, on a node's first pull: 2.1 CPU-seconds of about
// 38 when 16 fresh nodes on one machine pulled 256 MiB. A shard deleted
// later is still created again by the write that needs it.
// They get pm's mode and group.
func (p paths) makeShards(pm perm) error {
	for i := range 256 {
		dir := p.chunks + "/" + hex.EncodeToString([]byte{byte(i)})
		err := os.Mkdir(dir, pm.dir)
		if err == nil {
			err = pm.setDir(dir)
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}
