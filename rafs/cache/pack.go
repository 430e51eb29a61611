package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Pack files. A cache that writes through the page cache (not direct I/O)
// appends its entries to pack files, DIR/packs/<writer>-<seq>.pack,
// instead of giving each its own file: a file per chunk cost the peer
// daemon a create, a rename and a new inode per chunk, 44 % of its CPU
// in a deployed pull (rafs/cache/CACHE.md, "Pack files"). Each process
// appends only to packs it created (its writer id is random, drawn at
// Open), and reads every pack: its own from what it wrote, the others'
// from a scan of their records, which it repeats at most once per
// packRefreshEvery when a lookup misses, and at every rescan. A record is
// an entry file's bytes (the 64-byte header, then the stored bytes); its
// writer writes the stored bytes first and the header last, so a scan
// that finds a header finds its payload written, and a scan stops at the
// first record whose header does not check (one being written, or one a
// crash tore), to try again from there the next time. Records are never
// changed or removed: a pack is evicted whole, least recently used first
// (its mtime, refreshed by reads at most once a minute, and by appends).

const (
	packsDirName = "packs"
	packSuffix   = ".pack"
	packMagic    = "DFLYPACK"
	// tombMagic starts the header of a removed record (Remove): a scan
	// skips it by its stored size, a read of it is a miss.
	tombMagic      = "DFLYGONE"
	packVersion    = 1
	packHeaderSize = 64
	// maxPackSize caps a pack; a cache with a capacity uses packs of at
	// most a sixteenth of it (and at least minPackSize), so that eviction
	// by whole packs stays fine-grained.
	maxPackSize = 64 << 20
	minPackSize = 1 << 20
	// maxLargePackSize caps the packs of a cache larger than 64 GB,
	// which are a thousandth of its capacity.
	maxLargePackSize = 1 << 30
	// dirTimeSlack is how recent a change of packs/ must be for a look
	// at the packs to list it again although its mtime did not change.
	dirTimeSlack = 100 * time.Millisecond
	// lookEvery is how often hits look at the packs too: a process that
	// only hits would otherwise hold the packs other processes evicted
	// open, and their disk space with them, for ever.
	lookEvery = 5 * time.Second
	// stalePackAge is how old a file in packs/ whose pack header does
	// not check must be before a scan deletes it: younger, it may be a
	// pack its writer has just created.
	stalePackAge = 5 * time.Minute
)

// packFile is one pack this process knows. Its fields are guarded by
// Cache.mu, except f, which is set once.
type packFile struct {
	name    string // base name, in packs/
	f       *os.File
	dev     uint64
	ino     uint64
	own     bool  // this process created it
	scanned int64 // bytes of it whose records are known here
	bytes   int64 // its size as last seen (own: the bytes reserved)
	used    int64 // last use known here, unix nanoseconds
	touched int64 // last mtime refresh by this process
	keys    []Key // keys located in it
	refs    int   // reads and writes in progress
	gone    bool  // deleted, or found gone: close once refs is 0
	broken  bool  // own: a write failed, so no more appends
}

// loc is where a key's record is.
type loc struct {
	p      *packFile
	off    int64 // of the record's header
	stored uint32
}

// packSet is a Cache's packs. Guarded by Cache.mu unless noted.
type packSet struct {
	dir     string
	writer  string // 16 hex digits, this process's
	seq     uint32
	files   map[string]*packFile
	locs    map[Key]loc
	w       *packFile // the pack appended to; nil until a put needs one
	capSize int64

	refreshMu sync.Mutex   // one look at the packs at a time
	dirMtime  int64        // packs/'s mtime at the last look, under refreshMu
	lastLook  atomic.Int64 // unix nanoseconds of the last look
}

func newPackSet(root string, capacity int64) *packSet {
	capSize := int64(maxPackSize)
	if capacity > 0 {
		capSize = min(maxPackSize, max(minPackSize, capacity/16))
		// Every process holds each pack it knows open: a large cache
		// takes larger packs, about a thousand of them at most.
		capSize = max(capSize, min(maxLargePackSize, capacity/1000))
	}
	return &packSet{
		dir:     root + "/" + packsDirName,
		writer:  fmt.Sprintf("%016x", rand.Uint64()),
		files:   make(map[string]*packFile),
		locs:    make(map[Key]loc),
		capSize: capSize,
	}
}

// parsePackName reports whether name is a pack's: 16 hex digits, a dash,
// 8 hex digits and packSuffix.
func parsePackName(name string) bool {
	base, ok := strings.CutSuffix(name, packSuffix)
	return ok && len(base) == 25 && base[16] == '-' && isLowerHex(base[:16]) && isLowerHex(base[17:])
}

// encodePackHeader returns a pack's first 64 bytes: magic, version, zero
// padding, and the CRC32-C of bytes 0 to 59 at 60.
func encodePackHeader() []byte {
	b := make([]byte, packHeaderSize)
	copy(b, packMagic)
	binary.LittleEndian.PutUint16(b[8:], packVersion)
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

// checkPackHeader checks a pack's first 64 bytes.
func checkPackHeader(b []byte) error {
	if len(b) < packHeaderSize {
		return corruptf("pack header of %d bytes", len(b))
	}
	if string(b[:8]) != packMagic {
		return corruptf("pack magic %q", b[:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[60:]), crc32.Checksum(b[:60], castagnoli); got != want {
		return corruptf("pack header crc %08x, want %08x", got, want)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != packVersion {
		return corruptf("pack version %d, want %d", v, packVersion)
	}
	for _, x := range b[10:60] {
		if x != 0 {
			return corruptf("pack header padding not zero")
		}
	}
	return nil
}

// record is one record a scan found.
type record struct {
	key    Key
	off    int64
	stored uint32
}

// scanRecords reads the record headers of a pack from off to size,
// through readAt, and returns the records whose headers check and whose
// payloads end within size, in order, and the offset after the last one:
// it stops at the first header that does not check or record that does
// not fit. It does not read payloads.
func scanRecords(readAt func([]byte, int64) (int, error), off, size int64) ([]record, int64, error) {
	var recs []record
	var hb [headerSize]byte
	for off+headerSize <= size {
		if _, err := readAt(hb[:], off); err != nil {
			return recs, off, shortRead(err)
		}
		h, err := decodeHeader(hb[:])
		if err != nil {
			n, ok := decodeTombstone(hb[:])
			if !ok || off+headerSize+n > size {
				break
			}
			off += headerSize + n
			continue
		}
		end := off + headerSize + int64(h.meta.StoredSize)
		if end > size {
			break
		}
		recs = append(recs, record{key: h.key, off: off, stored: h.meta.StoredSize})
		off = end
	}
	return recs, off, nil
}

// errRemoved is a read of a record Remove marked removed.
var errRemoved = errors.New("cache: record removed")

// encodeTombstone returns the header that marks a removed record of
// stored bytes: tombMagic, the stored size at the entry header's offset,
// zeros, and the CRC32-C of bytes 0 to 59 at 60.
func encodeTombstone(stored uint32) []byte {
	b := make([]byte, headerSize)
	copy(b, tombMagic)
	binary.LittleEndian.PutUint32(b[offStoredSize:], stored)
	binary.LittleEndian.PutUint32(b[offHeaderCRC:], crc32.Checksum(b[:offHeaderCRC], castagnoli))
	return b
}

// decodeTombstone returns the stored size a removed record's header
// gives, if b is one.
func decodeTombstone(b []byte) (int64, bool) {
	if len(b) < headerSize || string(b[:len(tombMagic)]) != tombMagic {
		return 0, false
	}
	if binary.LittleEndian.Uint32(b[offHeaderCRC:]) != crc32.Checksum(b[:offHeaderCRC], castagnoli) {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b[offStoredSize:])
	if n > maxStored {
		return 0, false
	}
	return int64(n), true
}

// removeRecord marks k's record removed in its pack, if k is located in
// one and this process may write the pack: its header becomes a
// tombstone (every process's next read of it misses; scans skip it) and
// its payload's space is given back (a hole). It reports whether it did.
func (c *Cache) removeRecord(k Key) bool {
	l, release, ok := c.locate(k)
	if !ok {
		return false
	}
	defer release()
	f := l.p.f
	if !l.p.own {
		var err error
		if f, err = os.OpenFile(c.packs.dir+"/"+l.p.name, os.O_WRONLY|syscall.O_NOFOLLOW, 0); err != nil {
			return false
		}
		defer f.Close()
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil || uint64(st.Ino) != l.p.ino || uint64(st.Dev) != l.p.dev {
			return false // another file at that name since
		}
	}
	if _, err := f.WriteAt(encodeTombstone(l.stored), l.off); err != nil {
		return false
	}
	if l.stored > 0 {
		_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, l.off+headerSize, int64(l.stored))
	}
	return true
}

// putPack appends k's record to this process's pack and locates k there.
// The caller has checked k, m and stored, and admitted the bytes.
func (c *Cache) putPack(k Key, m Meta, stored []byte) (fileID, error) {
	var hb [headerSize]byte
	encodeHeader(&hb, header{key: k, meta: m, payloadCRC: crc32.Checksum(stored, castagnoli)})
	n := int64(headerSize + len(stored))
	c.mu.Lock()
	lost := c.checkWriterLocked()
	p, off, err := c.reserveLocked(n)
	if err == nil {
		p.refs++
	}
	c.mu.Unlock()
	if len(lost) > 0 {
		if f := c.onEvict.Load(); f != nil {
			(*f)(lost)
		}
	}
	if err != nil {
		return fileID{}, err
	}
	// Payload first, header last: a scan that reads the header finds
	// the payload written.
	_, err = p.f.WriteAt(stored, off+headerSize)
	if err == nil {
		_, err = p.f.WriteAt(hb[:], off)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p.refs--
	if err != nil {
		c.takeBackLocked(p, off, n)
		c.closeIfDoneLocked(p)
		return fileID{}, err
	}
	if p.gone {
		// Deleted while written (a whole-directory delete, or another
		// process's eviction): the record is nobody's.
		c.closeIfDoneLocked(p)
		return fileID{}, fmt.Errorf("pack %s deleted while written: %w", p.name, fs.ErrNotExist)
	}
	now := time.Now().UnixNano()
	if old, ok := c.packs.locs[k]; !ok || old.p.gone {
		c.packs.locs[k] = loc{p: p, off: off, stored: uint32(len(stored))}
		p.keys = append(p.keys, k)
	}
	p.used = now
	return packID(p, off), nil
}

// takeBackLocked undoes a failed write of n bytes at off in p, so that
// the space it took (ENOSPC leaves part of it written) comes back: the
// last reservation is cut off the pack, which takes the next record
// there; one with reservations after it is punched out, and the pack
// takes no more records (a scan stops at the hole, so the records after
// it are this process's alone). Under c.mu.
func (c *Cache) takeBackLocked(p *packFile, off, n int64) {
	if p.gone || p.f == nil {
		return
	}
	if p.bytes == off+n && p.f.Truncate(off) == nil {
		p.bytes = off
		return
	}
	_ = unix.Fallocate(int(p.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	p.broken = true
	if c.packs.w == p {
		c.packs.w = nil
	}
}

// packID is what vouch.go remembers for the record at off in p: records
// never change once written, so the pack's inode and the offset name the
// bytes (the CRC of every read checks them for damage).
func packID(p *packFile, off int64) fileID {
	return fileID{dev: p.dev, ino: p.ino, ctimeSec: -1, size: off}
}

// checkWriterLocked forgets this process's pack if it was unlinked (the
// directory deleted by hand, or another process's eviction), so that the
// next record starts a new pack rather than vanish with it; it returns
// the keys forgotten. A stat per put. Under c.mu.
func (c *Cache) checkWriterLocked() []Key {
	w := c.packs.w
	if w == nil || w.f == nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(int(w.f.Fd()), &st) != nil || st.Nlink > 0 {
		return nil
	}
	return c.dropPackLocked(w)
}

// reserveLocked returns the pack and offset for a record of n bytes,
// starting a new pack when there is none or it is full. Under c.mu.
func (c *Cache) reserveLocked(n int64) (*packFile, int64, error) {
	ps := c.packs
	if w := ps.w; w != nil && !w.gone && !w.broken && (w.bytes+n <= ps.capSize || w.bytes == packHeaderSize) {
		off := w.bytes
		w.bytes += n
		return w, off, nil
	}
	p, err := c.createPackLocked()
	if err != nil {
		return nil, 0, err
	}
	ps.w = p
	off := p.bytes
	p.bytes += n
	return p, off, nil
}

// createPackLocked creates this process's next pack, with its header.
// Under c.mu.
func (c *Cache) createPackLocked() (*packFile, error) {
	ps := c.packs
	var f *os.File
	var name string
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		ps.seq++
		name = ps.writer + "-" + fmt.Sprintf("%08x", ps.seq) + packSuffix
		f, err = os.OpenFile(ps.dir+"/"+name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, c.perm.file)
		if isNotExist(err) {
			if err = c.perm.mkdirs(c.paths.root, ps.dir); err == nil {
				continue
			}
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create pack: %w", err)
	}
	fail := func(err error) (*packFile, error) {
		f.Close()
		os.Remove(ps.dir + "/" + name)
		return nil, fmt.Errorf("create pack %s: %w", name, err)
	}
	if err := c.perm.setFile(f); err != nil {
		return fail(err)
	}
	if _, err := f.WriteAt(encodePackHeader(), 0); err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fail(err)
	}
	p := &packFile{name: name, f: f, dev: uint64(st.Dev), ino: st.Ino, own: true,
		scanned: packHeaderSize, bytes: packHeaderSize, used: time.Now().UnixNano()}
	ps.files[name] = p
	return p, nil
}

// closeIfDoneLocked closes p's file once it is gone and no read or write
// uses it. Under c.mu.
func (c *Cache) closeIfDoneLocked(p *packFile) {
	if p.gone && p.refs == 0 && p.f != nil {
		p.f.Close()
		p.f = nil
	}
}

// dropPackLocked forgets p and the keys located in it, returning those
// keys. Under c.mu.
func (c *Cache) dropPackLocked(p *packFile) []Key {
	p.gone = true
	delete(c.packs.files, p.name)
	if c.packs.w == p {
		c.packs.w = nil
	}
	var dropped []Key
	for _, k := range p.keys {
		if l, ok := c.packs.locs[k]; ok && l.p == p {
			delete(c.packs.locs, k)
			c.idx.remove(k)
			dropped = append(dropped, k)
		}
	}
	p.keys = nil
	c.closeIfDoneLocked(p)
	return dropped
}

// locate returns k's record, holding its pack open, and the function that
// lets it go.
func (c *Cache) locate(k Key) (loc, func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.packs.locs[k]
	if !ok || l.p.gone || l.p.f == nil {
		return loc{}, nil, false
	}
	l.p.refs++
	return l, func() {
		c.mu.Lock()
		l.p.refs--
		c.closeIfDoneLocked(l.p)
		c.mu.Unlock()
	}, true
}

// openRecord reads and checks the header of the record at l, which must
// name k: an entryFile whose payload is the record's (readPayload checks
// its CRC). It shares l's pack file; do not close it.
func openRecord(l loc, k Key) (*entryFile, error) {
	var hb [headerSize]byte
	if _, err := l.p.f.ReadAt(hb[:], l.off); err != nil {
		return nil, shortRead(err)
	}
	h, err := decodeHeader(hb[:])
	if err != nil {
		if _, ok := decodeTombstone(hb[:]); ok {
			return nil, errRemoved
		}
		return nil, err
	}
	if h.key != k || h.meta.StoredSize != l.stored {
		return nil, corruptf("record at %d of %s names %s", l.off, l.p.name, h.key)
	}
	return &entryFile{f: l.p.f, hdr: h, payloadOff: l.off + headerSize}, nil
}

// getPack is Get's look in the packs: found reports whether k is located
// in one, and then err is the read's outcome (a corrupt record is
// forgotten here, and ErrNotFound). A removed record is forgotten and
// not found: the caller looks on, for the key put again.
func (c *Cache) getPack(k Key, dst []byte) (m Meta, out []byte, id fileID, found bool, err error) {
	l, release, ok := c.locate(k)
	if !ok {
		return Meta{}, nil, fileID{}, false, nil
	}
	defer release()
	e, err := openRecord(l, k)
	if err == nil {
		out, err = e.readPayload(dst)
	}
	if errors.Is(err, errRemoved) {
		c.forgetRecord(k, l)
		return Meta{}, nil, fileID{}, false, nil // look elsewhere: it may be put again
	}
	if err != nil {
		return Meta{}, nil, fileID{}, true, c.recordFailed(k, l, err)
	}
	c.usedPack(k, l.p)
	c.lookIfStale()
	return e.hdr.meta, out, packID(l.p, l.off), true, nil
}

// recordFailed turns a failure to read k's record at l into an error: a
// corrupt record is forgotten (the pack stays; other records in it are
// fine) and reported as ErrNotFound.
func (c *Cache) recordFailed(k Key, l loc, err error) error {
	if errors.Is(err, errCorrupt) {
		c.n.corrupt.Add(1)
		c.forgetRecord(k, l)
		c.log.Warn("cache: dropped corrupt record", "key", k, "pack", l.p.name, "offset", l.off, "err", err)
		return fmt.Errorf("%w: %s: corrupt record: %v", ErrNotFound, k, err)
	}
	c.n.errors.Add(1)
	return fmt.Errorf("cache: read %s: %w", k, err)
}

// forgetRecord forgets k if it is still located at l.
func (c *Cache) forgetRecord(k Key, l loc) {
	c.mu.Lock()
	if cur, ok := c.packs.locs[k]; ok && cur.p == l.p && cur.off == l.off {
		delete(c.packs.locs, k)
		c.idx.remove(k)
	}
	c.mu.Unlock()
	c.vouched.forget(k)
}

// usedPack records a hit on k in p: most recently used here, and in the
// pack's mtime when this process last refreshed it more than
// touchInterval ago.
func (c *Cache) usedPack(k Key, p *packFile) {
	now := time.Now()
	c.mu.Lock()
	c.idx.touch(k, now.UnixNano())
	p.used = now.UnixNano()
	touch := now.UnixNano()-p.touched >= int64(touchInterval)
	if touch {
		p.touched = now.UnixNano()
	}
	c.mu.Unlock()
	if touch {
		_ = os.Chtimes(c.packs.dir+"/"+p.name, time.Time{}, now)
	}
}

// hasPack reports whether k is located in a pack.
func (c *Cache) hasPack(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.packs.locs[k]
	return ok && !l.p.gone
}

// refreshOnMiss looks for what other processes appended since the last
// look, for a lookup that missed, unless a look is running; it reports
// whether it learnt of any record or of an entry-file writer, so that
// the lookup is worth repeating.
func (c *Cache) refreshOnMiss() bool {
	ps := c.packs
	if !ps.refreshMu.TryLock() {
		return false
	}
	defer ps.refreshMu.Unlock()
	return c.refreshLocked(false, false)
}

// lookIfStale looks at the packs, for a hit, when nothing did for
// lookEvery.
func (c *Cache) lookIfStale() {
	if time.Now().UnixNano()-c.packs.lastLook.Load() >= int64(lookEvery) {
		c.refreshOnMiss()
	}
}

// refreshPacks looks at the packs now, listing packs/ whatever its
// mtime says.
func (c *Cache) refreshPacks() {
	c.packs.refreshMu.Lock()
	defer c.packs.refreshMu.Unlock()
	c.refreshLocked(true, true)
}

// refreshLocked learns the records other processes appended to their
// packs since the last look, and, when packs/ changed (or always with
// relist), the packs created since and those gone (deleted by another
// process's eviction, or by hand), which it forgets with their keys,
// handing those to the eviction hook. What it costs when nothing
// changed is a stat of packs/ and one of each other process's pack.
// It reports whether it found a record, or an entry-file writer, new to
// this Cache. Under refreshMu; it takes c.mu only to read and apply, not
// while it reads files.
//
// With hookNow the eviction hook runs before it returns (a rescan's
// caller expects that); otherwise on a goroutine of its own, because
// lookups run it, and a hook may itself look up keys while holding its
// own locks (the peer's does: a hook run from inside its Has would wait
// for the lock its caller holds).
func (c *Cache) refreshLocked(relist, hookNow bool) bool {
	ps := c.packs
	ps.lastLook.Store(time.Now().UnixNano())
	learnt := false
	if !c.entryFiles.Load() {
		if _, err := os.Lstat(c.paths.mark); err == nil {
			c.entryFiles.Store(true)
			learnt = true
		}
	}
	var dst unix.Stat_t
	if err := unix.Stat(ps.dir, &dst); err == nil {
		// Directory times are coarse (a few ms): a listing taken in the
		// tick of the last change may not show it, so one that recent
		// is taken again.
		m := dst.Mtim.Nano()
		if m != ps.dirMtime || time.Now().UnixNano()-m < int64(dirTimeSlack) {
			relist = true
		}
		ps.dirMtime = m
	} else {
		relist = true
	}
	type job struct {
		p     *packFile
		from  int64
		isNew bool
		name  string
	}
	var jobs []job
	var dropped []Key
	if relist {
		names, err := readNames(ps.dir)
		if err != nil && !isNotExist(err) {
			c.n.errors.Add(1)
			c.log.Warn("cache: list packs", "dir", ps.dir, "err", err)
			return learnt
		}
		listed := make(map[string]bool, len(names))
		for _, n := range names {
			if parsePackName(n) {
				listed[n] = true
			}
		}
		c.mu.Lock()
		for name, p := range ps.files {
			if p.own && !listed[name] && p.f != nil {
				// Maybe created since the listing: its own link count
				// says whether it is gone.
				var st unix.Stat_t
				if unix.Fstat(int(p.f.Fd()), &st) == nil && st.Nlink > 0 {
					continue
				}
			}
			if !listed[name] {
				dropped = append(dropped, c.dropPackLocked(p)...)
				continue
			}
			delete(listed, name)
			if !p.own {
				p.refs++
				jobs = append(jobs, job{p: p, from: p.scanned})
			}
		}
		c.mu.Unlock()
		for name := range listed {
			jobs = append(jobs, job{name: name, isNew: true})
		}
	} else {
		c.mu.Lock()
		for _, p := range ps.files {
			if !p.own && !p.gone {
				p.refs++
				jobs = append(jobs, job{p: p, from: p.scanned})
			}
		}
		c.mu.Unlock()
	}
	fixed := 0
	for _, j := range jobs {
		if j.isNew {
			p, fix, ok := c.openPack(j.name)
			if !ok {
				continue
			}
			if fix {
				fixed++
			}
			j.p, j.from = p, p.scanned
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(j.p.f.Fd()), &st); err != nil {
			c.n.errors.Add(1)
			c.releaseScan(j.p, nil, j.from, 0, 0)
			continue
		}
		var recs []record
		next := j.from
		if st.Size > j.from {
			var err error
			recs, next, err = scanRecords(j.p.f.ReadAt, j.from, st.Size)
			if err != nil {
				c.n.errors.Add(1)
				c.log.Warn("cache: scan pack", "pack", j.p.name, "err", err)
			}
		}
		if c.releaseScan(j.p, recs, next, st.Size, st.Mtim.Nano()) {
			learnt = true
		}
	}
	if fixed > 0 {
		c.log.Warn("cache: set file permissions", "dir", c.cfg.Dir, "packs", fixed,
			"mode", c.perm.file.String(), "gid", c.perm.gid)
	}
	if f := c.onEvict.Load(); f != nil && len(dropped) > 0 {
		if hookNow {
			(*f)(dropped)
		} else {
			go (*f)(dropped)
		}
	}
	return learnt
}

// openPack opens another process's pack found in packs/, checking its
// header, and adds it to the set with a reference held for the scan. A
// file whose header does not check is left alone while it may be a pack
// being created, and deleted once stalePackAge old.
func (c *Cache) openPack(name string) (p *packFile, fixed, ok bool) {
	path := c.packs.dir + "/" + name
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if !isNotExist(err) {
			c.n.errors.Add(1)
		}
		return nil, false, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, false, false
	}
	hb := make([]byte, packHeaderSize)
	if _, err := f.ReadAt(hb, 0); err != nil || checkPackHeader(hb) != nil {
		f.Close()
		if time.Since(time.Unix(0, st.Mtim.Nano())) > stalePackAge && !c.readOnly {
			if os.Remove(path) == nil {
				c.n.corrupt.Add(1)
				c.log.Warn("cache: deleted a file in packs/ that is no pack", "path", path)
			}
		}
		return nil, false, false
	}
	fixed = false
	if !c.readOnly && c.perm.wrong(&st, c.perm.file) {
		fixed = c.perm.setFile(f) == nil // best effort, as at scans of entry files
	}
	p = &packFile{name: name, f: f, dev: uint64(st.Dev), ino: st.Ino, scanned: packHeaderSize,
		bytes: st.Size, used: st.Mtim.Nano(), refs: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.packs.files[name]; ok {
		// Ours, created since the listing.
		f.Close()
		old.refs++
		return old, fixed, true
	}
	c.packs.files[name] = p
	return p, fixed, true
}

// releaseScan applies a scan of p: the records found, where to go on
// from, its size and mtime; and lets p go. It reports whether a record
// located a key new here.
func (c *Cache) releaseScan(p *packFile, recs []record, next, size, mtime int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.refs--
	learnt := false
	if !p.gone {
		if next > p.scanned {
			p.scanned = next
		}
		p.bytes = max(p.bytes, size)
		p.used = max(p.used, mtime)
		for _, r := range recs {
			if l, ok := c.packs.locs[r.key]; ok && !l.p.gone {
				continue
			}
			c.packs.locs[r.key] = loc{p: p, off: r.off, stored: r.stored}
			p.keys = append(p.keys, r.key)
			learnt = true
			if !c.idx.touch(r.key, p.used) {
				c.idx.add(r.key, headerSize+int64(r.stored), p.used)
			}
		}
	}
	c.closeIfDoneLocked(p)
	return learnt
}

// markEntryFiles creates DIR/entry-files, which tells the processes
// sharing the directory that this one writes entry files: they look for
// entries there as well as in packs from their next scan of packs on.
func (c *Cache) markEntryFiles() error {
	f, err := os.OpenFile(c.paths.mark, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, c.perm.file)
	if err != nil {
		return err
	}
	err = c.perm.setFile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// packUnit is a pack as eviction sees it.
type packUnit struct {
	p    *packFile
	size int64
	used int64
}

// packScanned returns what the index rebuild needs of the packs: every
// located key with its record's size and its pack's last use; and the
// packs as eviction units. Under c.mu.
func (c *Cache) packScannedLocked() ([]scanned, []packUnit) {
	var found []scanned
	units := make([]packUnit, 0, len(c.packs.files))
	for _, p := range c.packs.files {
		if p.gone {
			continue
		}
		units = append(units, packUnit{p: p, size: p.bytes, used: p.used})
		for _, k := range p.keys {
			if l, ok := c.packs.locs[k]; ok && l.p == p {
				found = append(found, scanned{key: k, size: headerSize + int64(l.stored), mtime: p.used})
			}
		}
	}
	return found, units
}

// removePack deletes p's file, for eviction, and forgets it here. It
// returns the keys it held.
func (c *Cache) removePack(p *packFile) ([]Key, error) {
	err := os.Remove(c.packs.dir + "/" + p.name)
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropPackLocked(p), nil
}

// packCount returns how many packs this Cache knows.
func (c *Cache) packCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.packs.files)
}

// packNameOf is for tests: the pack k is located in.
func (c *Cache) packNameOf(k Key) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.packs.locs[k]; ok {
		return l.p.name
	}
	return ""
}
