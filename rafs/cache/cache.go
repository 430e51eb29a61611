package cache

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"damselfly/rafs"
)

// Errors callers branch on.
var (
	// ErrNotFound is returned (possibly wrapped) for a chunk the cache does
	// not hold, including one that was evicted or deleted by hand, and one
	// whose file failed a check and was deleted. The caller fetches the
	// chunk elsewhere.
	ErrNotFound = errors.New("cache: chunk not found")
	// ErrNoSpace is wrapped by Put's error when the filesystem is full or
	// over quota (ENOSPC, EDQUOT). Nothing partial is left behind; the
	// caller serves the chunk from memory.
	ErrNoSpace = errors.New("cache: no space left")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("cache: closed")
	// ErrReadOnly is wrapped by Put's error in a cache this process may
	// read but not write (Config.Group): another process stores chunks.
	ErrReadOnly = errors.New("cache: read-only for this process")
)

// Meta describes an entry's stored bytes.
type Meta struct {
	// Compressed reports whether the stored bytes are a zstd frame; if
	// not, they are the chunk itself.
	Compressed bool
	// Size is the chunk's uncompressed length, at most rafs.MaxChunkSize.
	Size uint32
	// StoredSize is the length of the stored bytes, at most
	// rafs.MaxChunkSize; equal to Size when not compressed.
	StoredSize uint32
}

// Cache is a node chunk cache over one directory, which other Caches, in
// this process or others, may share. All methods are safe for concurrent
// use.
type Cache struct {
	cfg   Config
	paths paths
	perm  perm // modes and group of what it creates
	// readOnly is set when this process may not create files in the
	// cache (Config.Group): Put refuses and rescans do not evict.
	readOnly bool
	log      *slog.Logger
	high     int64 // watermarks in bytes; 0 when unlimited
	low      int64
	// rescanEvery is how many bytes this process writes between rescans
	// even while its own count stays below high, so that it notices what
	// other processes wrote (see CACHE.md); 0 when unlimited.
	rescanEvery int64

	closed atomic.Bool
	// direct is whether entry files are read and written with direct I/O:
	// Config.DirectIO, unless the file system refused it at Open.
	direct atomic.Bool
	// evictMu lets one rescan run at a time in this Cache. It is taken
	// before the directory lock, and never while mu is held.
	evictMu sync.Mutex

	// onEvict, if set, is told the keys each eviction by this Cache
	// deleted (SetEvictHook).
	onEvict atomic.Pointer[func([]Key)]

	// hot serves recently used entries from memory; nil when
	// Config.HotBytes is 0 or the cache reads through the page cache.
	hot *hot

	mu      sync.Mutex // guards idx, written and writing
	idx     *index
	written int64 // bytes of entry files written since the last rescan
	// writing is the bytes of entry files being written now: admitted
	// by admit and not yet counted in written.
	writing int64
	// settled is signalled (with mu) whenever a write ends.
	settled *sync.Cond

	// vouched remembers the entry files whose bytes are known to be
	// right (Meta.Vouched).
	vouched vouched

	// packs holds the pack files (pack.go); entryFiles is whether entry
	// files may be in the directory (the last scan found some, or this
	// process writes them: direct I/O), so that lookups look there too.
	packs      *packSet
	entryFiles atomic.Bool

	n counters
}

// Open opens the cache in cfg.Dir, creating the directory if needed. It
// scans the existing entries into the index, least recently used (oldest
// mtime) first, deletes temp files that crashed writers left (only those
// older than a few minutes: a younger one may be another live process's
// write in progress) and evicts if the directory is above the high
// watermark. It may block while another process evicts.
func Open(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cache config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{
		cfg:   cfg,
		paths: newPaths(cfg.Dir),
		log:   cfg.Logger,
		high:  cfg.highBytes(),
		low:   cfg.lowBytes(),
		idx:   newIndex(),
		packs: newPackSet(cfg.Dir, cfg.Capacity),
	}
	c.entryFiles.Store(cfg.entryFiles)
	c.settled = sync.NewCond(&c.mu)
	if c.high > 0 {
		c.rescanEvery = max((c.high-c.low)/2, 1)
	}
	gid, err := resolveGroup(cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("open cache: group: %w", err)
	}
	c.perm = newPerm(gid)
	if err := c.perm.mkdirs(c.paths.root, c.paths.chunks); err != nil {
		return nil, fmt.Errorf("open cache: %w", err)
	}
	if c.readOnly = !writable(c.paths.chunks); c.readOnly {
		c.log.Info("cache: this process may not write the cache; reading only", "dir", cfg.Dir)
	} else {
		if err := c.paths.makeShards(c.perm); err != nil {
			return nil, fmt.Errorf("open cache: %w", err)
		}
		if err := c.perm.mkdirs(c.paths.root, c.packs.dir); err != nil {
			return nil, fmt.Errorf("open cache: %w", err)
		}
		if err := c.fixDirs(); err != nil {
			return nil, fmt.Errorf("open cache: %w", err)
		}
	}
	if cfg.DirectIO && !c.readOnly {
		probe := probeDirect
		if cfg.probeDirect != nil {
			probe = cfg.probeDirect
		}
		// In a shard, as a temp file: if this process dies before
		// deleting it, a later scan does.
		if probe(c.paths.shard(Key{})) {
			c.direct.Store(true)
			c.entryFiles.Store(true)
		} else {
			c.log.Info("cache: the file system refuses direct I/O; reading and writing through the page cache", "dir", cfg.Dir)
		}
	}
	if (c.direct.Load() || cfg.entryFiles) && !c.readOnly {
		if err := c.markEntryFiles(); err != nil {
			return nil, fmt.Errorf("open cache: %w", err)
		}
	}
	if cfg.HotBytes > 0 && c.direct.Load() {
		c.hot = newHot(hotBudget(cfg))
	}
	if err := c.Rescan(); err != nil {
		return nil, fmt.Errorf("open cache: %w", err)
	}
	return c, nil
}

// fixDirs gives the cache's directories the mode and group c.perm says,
// saying so when any had others: a cache made by an older version (0755)
// or opened before with another Config.Group.
func (c *Cache) fixDirs() error {
	dirs := make([]string, 0, 2+256)
	dirs = append(dirs, c.paths.root, c.paths.chunks, c.packs.dir)
	for i := range 256 {
		dirs = append(dirs, c.paths.shard(SHA256(rafs.Digest{byte(i)})))
	}
	n, err := c.perm.fixDirs(dirs)
	if n > 0 {
		c.log.Warn("cache: set directory permissions; files follow at the scan", "dir", c.cfg.Dir,
			"directories", n, "mode", c.perm.dir.String(), "gid", c.perm.gid)
	}
	return err
}

// SetEvictHook has f told, after each eviction by this Cache, the
// keys of the entries it deleted (not those other processes sharing
// the directory delete). f is called on the goroutine that evicted (often
// one in Put) before that eviction ends, without the index lock held: it
// may call the Cache's readers (Has, Get), and it should be quick.
// A nil f removes the hook.
func (c *Cache) SetEvictHook(f func(keys []Key)) {
	if f == nil {
		c.onEvict.Store(nil)
		return
	}
	c.onEvict.Store(&f)
}

// Close marks the cache closed, after waiting for an eviction in progress
// to finish. Later calls of other methods return ErrClosed (Has returns
// false, Keys nil); Stats keeps working. Close is idempotent and returns
// nil: the cache holds no open files between calls.
func (c *Cache) Close() error {
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	c.closed.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.packs.files {
		p.gone = true // not deleted: only let go of here
		c.closeIfDoneLocked(p)
	}
	c.packs.w = nil
	return nil
}

// Keys returns the key of every entry in this process's index, least
// recently used first: what it put, read or found at its last scan. Entries other
// processes added since are missing, and entries deleted by hand are
// present until something notices; call Rescan first for the directory's
// current holdings. The slice is the caller's.
func (c *Cache) Keys() []Key {
	if c.closed.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idx.keys()
}

// forget drops k from the index, when its file is gone.
// forgetEntry forgets k after its entry file was found missing, unless
// k is located in a pack.
func (c *Cache) forgetEntry(k Key) {
	c.mu.Lock()
	_, inPack := c.packs.locs[k]
	if !inPack {
		c.idx.remove(k)
	}
	c.mu.Unlock()
	if !inPack {
		c.hot.forget(k)
		c.vouched.forget(k)
	}
}

func (c *Cache) forget(k Key) {
	c.mu.Lock()
	c.idx.remove(k)
	delete(c.packs.locs, k)
	c.mu.Unlock()
	c.hot.forget(k)
	c.vouched.forget(k)
}
