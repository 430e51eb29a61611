package fusemount

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sys/unix"

	"damselfly/rafs"
)

// fileCopies is the file copy store: the decoded content of whole
// regular files, one plain file each, which the kernel reads through
// FUSE passthrough (passthrough.go). A copy is named by fileCopyName, a
// digest of the file's chunk list, so hardlinks and identical files in
// any image share one copy. Layout: DIR/<64 hex>, one flat directory:
// ext4 places the inodes of one directory's files together, in the
// order they are made (the order files were first read), so a tree read
// again finds its copies' inodes a few per disk block, as it finds the
// files of an unpacked tree; hashed shard directories scattered them
// over the disk and the warm read of a tree of small files waited on an
// inode read per file. Temp files start with a dot. Copies appear by rename, complete; Open checks the
// size; eviction unlinks the least recently opened copies beyond the
// capacity (an open copy stays readable: the kernel holds it).
//
// Each process keeps its own index of the directory, filled by a scan
// that starts with its first put and by its own opens and puts; when a put finds
// the index over capacity, it scans again (at most once a minute) before
// evicting, so that daemons sharing the directory keep it near the
// capacity together. Safe for concurrent use.
type fileCopies struct {
	dir      string
	capacity int64
	log      *slog.Logger

	mu       sync.Mutex
	lru      *simplelru.LRU[string, int64] // name -> size
	bytes    int64
	lastScan time.Time
	evicted  int64
	scanOnce sync.Once
	scanning sync.WaitGroup // the first scan
}

// copyTempMaxAge is how old a temp file must be for a scan to delete it
// (a daemon that died while writing one).
const copyTempMaxAge = time.Hour

// rescanEvery bounds how often an eviction rescans the directory.
const rescanEvery = time.Minute

func openFileCopies(dir string, capacity int64, log *slog.Logger) (*fileCopies, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("file copies: %w", err)
	}
	fc := &fileCopies{dir: dir, capacity: capacity, log: log}
	fc.lru, _ = simplelru.NewLRU[string, int64](math.MaxInt, func(_ string, size int64) { fc.bytes -= size })
	return fc, nil
}

// startScan starts the first scan, in the background, once. It lists
// every copy, a stat each: a second for the Debian tree's 27k copies
// with the page cache dropped, which made mount-ready time wait, and
// then competed with the mount's own first reads. Only eviction needs
// the whole directory in the index, so the first put starts it; until
// then the index holds the copies this process opened.
func (fc *fileCopies) startScan() {
	fc.scanOnce.Do(func() {
		fc.scanning.Add(1)
		go func() {
			defer fc.scanning.Done()
			if err := fc.rescan(); err != nil {
				fc.log.Warn("file copies: scan failed", "dir", fc.dir, "err", err)
			}
		}()
	})
}

// Close waits for a scan in progress.
func (fc *fileCopies) Close() { fc.scanning.Wait() }

// fileCopyName names the copy of file in: the hex SHA-256 of a version
// tag, the digest algorithm, the size, and for every stretch of the file
// the digest of its chunk and where in the chunk its bytes are. Those
// digests are what the bootstrap (and through it the manifest) pins,
// and they fix the content: two files with the same name have the same
// bytes.
func fileCopyName(b *rafs.Bootstrap, in rafs.Inode) (string, error) {
	h := sha256.New()
	var rec [8 + 32 + 4 + 4]byte
	h.Write([]byte("damselfly file copy v1\x00"))
	binary.LittleEndian.PutUint64(rec[:8], in.Size)
	rec[8] = byte(b.DigestAlgo())
	h.Write(rec[:9])
	for i := range in.DataCount {
		seg, err := b.FileSegment(in, i)
		if err != nil {
			return "", err
		}
		copy(rec[8:40], seg.Digest[:])
		binary.LittleEndian.PutUint32(rec[40:], seg.Off)
		binary.LittleEndian.PutUint32(rec[44:], seg.Len)
		h.Write(rec[8:])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (fc *fileCopies) path(name string) string {
	return filepath.Join(fc.dir, name)
}

// Open opens the copy called name read-only if it is there with size
// bytes, and returns its descriptor, which the caller closes. A copy of
// another size is deleted (a bad copy is never served) and reported
// absent. It opens with plain system calls: an os.File registers the
// descriptor with Go's poller and unregisters it again, a quarter of
// this function's time in a profile of a warm tree read.
func (fc *fileCopies) Open(name string, size uint64) (int, bool) {
	p := fc.path(name)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			fc.log.Warn("file copy unreadable; reading through the chunks", "copy", p, "err", err)
		}
		fc.forget(name)
		return -1, false
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) != size {
		unix.Close(fd)
		got := int64(-1)
		if err == nil {
			got = st.Size
		}
		fc.log.Warn("file copy damaged; deleting it", "copy", p, "size", got, "want", size)
		os.Remove(p)
		fc.forget(name)
		return -1, false
	}
	fc.mu.Lock()
	if _, ok := fc.lru.Get(name); !ok {
		// Put by another daemon sharing the directory.
		fc.lru.Add(name, st.Size)
		fc.bytes += st.Size
	}
	fc.mu.Unlock()
	return fd, true
}

// Has reports whether this process knows of a copy called name.
func (fc *fileCopies) Has(name string) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.lru.Contains(name)
}

func (fc *fileCopies) forget(name string) {
	fc.mu.Lock()
	fc.lru.Remove(name)
	fc.mu.Unlock()
}

// errCopyTooBig refuses a copy larger than the whole capacity.
var errCopyTooBig = errors.New("file larger than the file copy capacity")

// Put writes the copy called name, size bytes that write produces, to a
// temp file, checks its size and renames it into place; then evicts
// down to the capacity.
func (fc *fileCopies) Put(name string, size uint64, write func(io.Writer) error) error {
	if int64(size) > fc.capacity {
		return errCopyTooBig
	}
	fc.startScan()
	final := fc.path(name)
	if err := os.MkdirAll(fc.dir, 0o700); err != nil { // deleted by hand
		return err
	}
	tmp := filepath.Join(fc.dir, "."+name+"-"+strconv.FormatUint(rand.Uint64(), 36))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil && uint64(st.Size()) != size {
			err = fmt.Errorf("wrote %d bytes, want %d", st.Size(), size)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	fc.mu.Lock()
	if _, ok := fc.lru.Peek(name); !ok {
		fc.lru.Add(name, int64(size))
		fc.bytes += int64(size)
	}
	stale := fc.bytes > fc.capacity && time.Since(fc.lastScan) >= rescanEvery
	fc.mu.Unlock()
	if stale {
		// Other daemons may have put copies this index does not know.
		if err := fc.rescan(); err != nil {
			fc.log.Warn("file copies: rescan failed", "err", err)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.evictLocked(name)
	return nil
}

// evictLocked unlinks the least recently used copies while the index
// holds more than the capacity. keep (just put) goes last.
func (fc *fileCopies) evictLocked(keep string) {
	for fc.bytes > fc.capacity && fc.lru.Len() > 0 {
		name, _, _ := fc.lru.GetOldest()
		if name == keep && fc.lru.Len() > 1 {
			fc.lru.Get(name) // to the front; evict the next oldest
			continue
		}
		fc.lru.RemoveOldest()
		if err := os.Remove(fc.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			fc.log.Warn("file copies: evict", "copy", name, "err", err)
		}
		fc.evicted++
	}
}

type foundCopy struct {
	name  string
	size  int64
	mtime time.Time
}

// rescan lists the directory (without holding the lock), then rebuilds
// the index from it and evicts down to the capacity.
func (fc *fileCopies) rescan() error {
	all, err := fc.list()
	if err != nil {
		return err
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.mergeLocked(all)
	fc.evictLocked("")
	return nil
}

// list returns the copies in the directory, oldest modification first,
// and deletes stale temp files.
func (fc *fileCopies) list() ([]foundCopy, error) {
	type found = foundCopy
	var all []found
	ents, err := os.ReadDir(fc.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			if time.Since(fi.ModTime()) > copyTempMaxAge {
				os.Remove(filepath.Join(fc.dir, n))
			}
			continue
		}
		if !isCopyName(n) {
			continue
		}
		all = append(all, found{n, fi.Size(), fi.ModTime()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	return all, nil
}

// mergeLocked rebuilds the index from all, a listing of the directory:
// copies it does not know first (oldest first), then those it knows in
// its order of use, the most recent last. Copies it knows stay even
// when the listing lacks them: they may have been put after it was
// taken; one deleted by hand leaves the index when an open or an
// eviction finds it gone.
func (fc *fileCopies) mergeLocked(all []foundCopy) {
	known := fc.lru.Keys() // oldest first
	knownSize := make(map[string]int64, len(known))
	for _, k := range known {
		knownSize[k], _ = fc.lru.Peek(k)
	}
	fc.lru.Purge()
	fc.bytes = 0
	present := make(map[string]int64, len(all))
	for _, f := range all {
		present[f.name] = f.size
	}
	add := func(name string, size int64) {
		if _, ok := fc.lru.Peek(name); !ok {
			fc.lru.Add(name, size)
			fc.bytes += size
		}
	}
	// Copies other processes put, by age, then those this process
	// knows, in its order of use (the most recent last).
	knownSet := make(map[string]bool, len(known))
	for _, k := range known {
		knownSet[k] = true
	}
	for _, f := range all {
		if !knownSet[f.name] {
			add(f.name, f.size)
		}
	}
	for _, k := range known {
		if size, ok := present[k]; ok {
			add(k, size)
		} else {
			add(k, knownSize[k])
		}
	}
	fc.lastScan = time.Now()
}

// isCopyName reports whether s names a copy: 64 lower-case hex digits.
func isCopyName(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Stats returns the bytes and copies in the index, and the copies this
// process evicted.
func (fc *fileCopies) Stats() (bytes int64, copies int, evicted int64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.bytes, fc.lru.Len(), fc.evicted
}
