package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PutFile stores data as DIR/dir/name, for a file that is not a chunk
// but lives beside them (a mount daemon's copy of an image's bootstrap,
// DIR/bootstraps/<manifest hex>), and returns its path. Like an entry it
// appears atomically (temp file, then rename) with the cache's modes and
// group, and DIR/dir is created, or given them, as needed. dir and name
// are single path elements not starting with a dot; dir is not "chunks".
// Scans and eviction leave such files alone.
//
// In a cache this process may only read, the error wraps ErrReadOnly.
// PutFile is safe for concurrent use.
func (c *Cache) PutFile(dir, name string, data []byte) (string, error) {
	if c.closed.Load() {
		return "", ErrClosed
	}
	for _, s := range []string{dir, name} {
		if s == "" || s[0] == '.' || strings.ContainsRune(s, '/') || s == chunksDirName || s == lockFileName {
			return "", fmt.Errorf("cache: put file %s/%s: not a name of its own", dir, name)
		}
	}
	if c.readOnly {
		return "", fmt.Errorf("cache: put file %s/%s: %w", dir, name, ErrReadOnly)
	}
	sub := filepath.Join(c.paths.root, dir)
	if err := c.perm.mkdirs(c.paths.root, sub); err != nil {
		return "", fmt.Errorf("cache: put file %s/%s: %w", dir, name, err)
	}
	if n, err := c.perm.fixDirs([]string{sub}); err != nil {
		return "", fmt.Errorf("cache: put file %s/%s: %w", dir, name, err)
	} else if n > 0 {
		c.log.Warn("cache: set directory permissions", "dir", sub, "mode", c.perm.dir.String(), "gid", c.perm.gid)
	}
	final := filepath.Join(sub, name)
	var f *os.File
	var tmp string
	var err error
	for range 10 {
		tmp = filepath.Join(sub, tempPrefix+name+"-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, c.perm.file)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("cache: put file %s/%s: %w", dir, name, err)
	}
	err = c.perm.setFile(f)
	if err == nil {
		_, err = f.Write(data)
	}
	if err := commitTemp(f, tmp, final, err); err != nil {
		return "", fmt.Errorf("cache: put file %s/%s: %w", dir, name, err)
	}
	return final, nil
}
