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
	// entryMarkName is the file a process that writes entry files
	// (direct I/O) creates at open, so that the others look for entry
	// files too (see CACHE.md).
	entryMarkName = "entry-files"
	// tempPrefix starts every temp file name, followed by the entry's hex
	// digest, a dash and a random suffix. Scans skip such names and delete
	// them once they are older than staleTempAge.
	tempPrefix = ".tmp-"
	// blake3Suffix ends the name of a BLAKE3 entry: the same 32 bytes as
	// a SHA-256 digest name another chunk, whose entry is the bare hex.
	// Processes of the release before take only 64 hex digits for an
	// entry name, so they never open a BLAKE3 entry (whose header they
	// could not read).
	blake3Suffix = ".b3"
	// storedSuffix ends the name of a DigestStoredBlake3 entry (BLAKE3 of
	// the stored bytes): the same 32 bytes under the other algorithms
	// name other chunks. Processes of releases before it ignore the
	// name.
	storedSuffix = ".b3s"
)

// paths names the files of one cache directory.
type paths struct {
	root   string // Config.Dir
	chunks string // root/chunks
	lock   string // root/lock
	mark   string // root/entry-files
}

func newPaths(root string) paths {
	return paths{
		root:   root,
		chunks: filepath.Join(root, chunksDirName),
		lock:   filepath.Join(root, lockFileName),
		mark:   filepath.Join(root, entryMarkName),
	}
}

// shard is the directory that holds k's entry: chunks/<first 2 hex digits>.
func (p paths) shard(k Key) string {
	return p.chunks + "/" + hex.EncodeToString(k.Digest[:1])
}

// entry is k's entry file: chunks/<2 hex>/<name>, with name as entryName
// gives it.
func (p paths) entry(k Key) string {
	name := entryName(k)
	return p.chunks + "/" + name[:2] + "/" + name
}

// entryName is k's entry file name: the 64 hex digits of the digest, and
// for BLAKE3 blake3Suffix, for BLAKE3 of the stored bytes storedSuffix.
func entryName(k Key) string {
	var h [64 + len(storedSuffix)]byte
	hex.Encode(h[:64], k.Digest[:])
	n := 64
	switch k.Algo {
	case rafs.DigestBlake3:
		n += copy(h[64:], blake3Suffix)
	case rafs.DigestStoredBlake3:
		n += copy(h[64:], storedSuffix)
	}
	return string(h[:n])
}

// parseEntryName returns the key an entry file name spells: 64 lower
// case hex digits (SHA-256), or those and blake3Suffix (BLAKE3) or
// storedSuffix (BLAKE3 of the stored bytes).
func parseEntryName(name string) (Key, bool) {
	k := Key{Algo: rafs.DigestSHA256}
	switch {
	case len(name) == 64+len(blake3Suffix) && name[64:] == blake3Suffix:
		k.Algo = rafs.DigestBlake3
		name = name[:64]
	case len(name) == 64+len(storedSuffix) && name[64:] == storedSuffix:
		k.Algo = rafs.DigestStoredBlake3
		name = name[:64]
	}
	if len(name) != 64 || !isLowerHex(name) {
		return Key{}, false
	}
	_, err := hex.Decode(k.Digest[:], []byte(name))
	return k, err == nil
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
