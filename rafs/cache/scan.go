package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// staleTempAge is how old a temp file must be before a scan deletes it. A
// younger one may belong to a writer in another live process; a writer
// finishes a 16 MiB entry in well under a second.
const staleTempAge = 5 * time.Minute

// scanResult is what one pass over the directory found and cleaned.
type scanResult struct {
	entries []scanned
	corrupt int // entry files deleted because no entry can have their size
	temps   int // stale temp files deleted
	fixed   int // entry files given the cache's mode and group
}

// scanDir lists every entry file under p.chunks with its size and mtime,
// and deletes stale temp files and entry files of impossible sizes. It
// creates p.chunks when it is missing (the directory was deleted by hand).
// Names that are neither entries nor temp files, and anything that is not a
// regular file, are left alone. It costs one getdents per shard and one
// fstatat per file.
// Shards are scanned in parallel, a few at a time: the cost is system
// calls, which run on every core.
//
// Entry files with other modes or group than pm gives get pm's (what an
// older version made 0644, say), where this process may change them.
func scanDir(p paths, pm perm, now time.Time) (scanResult, error) {
	names, err := readNames(p.chunks)
	if errors.Is(err, fs.ErrNotExist) {
		return scanResult{}, pm.mkdirs(p.root, p.chunks)
	}
	if err != nil {
		return scanResult{}, fmt.Errorf("scan %s: %w", p.chunks, err)
	}
	names = slices.DeleteFunc(names, func(s string) bool { return !isShardName(s) })
	shards := make([]scanResult, len(names))
	var g errgroup.Group
	g.SetLimit(min(runtime.GOMAXPROCS(0), 8))
	for i, s := range names {
		g.Go(func() error {
			if err := scanShard(p.chunks+"/"+s, s, pm, now, &shards[i]); err != nil {
				return fmt.Errorf("scan %s: %w", s, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return scanResult{}, err
	}
	var res scanResult
	n := 0
	for _, s := range shards {
		n += len(s.entries)
	}
	res.entries = make([]scanned, 0, n)
	for _, s := range shards {
		res.entries = append(res.entries, s.entries...)
		res.corrupt += s.corrupt
		res.temps += s.temps
		res.fixed += s.fixed
	}
	return res, nil
}

func scanShard(dir, shard string, pm perm, now time.Time, res *scanResult) error {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil // deleted since listed, or not a directory: nothing of ours
	}
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	for _, name := range names {
		d, isEntry := parseEntryName(name)
		isTemp := strings.HasPrefix(name, tempPrefix)
		if !isEntry && !isTemp || isEntry && name[:2] != shard {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since listed
			}
			return fmt.Errorf("stat %s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		mtime := st.Mtim.Nano()
		switch {
		case isTemp:
			if now.UnixNano()-mtime > int64(staleTempAge) && unix.Unlinkat(fd, name, 0) == nil {
				res.temps++
			}
		case st.Size < headerSize || st.Size > maxEntrySize:
			if unix.Unlinkat(fd, name, 0) == nil {
				res.corrupt++
			}
		default:
			if pm.fixAt(fd, name, &st) {
				res.fixed++
			}
			res.entries = append(res.entries, scanned{key: d, size: st.Size, mtime: mtime})
		}
	}
	return nil
}

// readNames lists the names in dir.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
