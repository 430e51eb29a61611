package cache

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"

	"damselfly/rafs/bufpool"
)

// entryFile is an open entry whose header and length have been checked.
// Its payload is checked (CRC) when read.
type entryFile struct {
	f   *os.File
	fi  fs.FileInfo
	hdr header
	// payloadOff is where the payload is when e is a pack record (see
	// openRecord), else 0: at headerSize. Such an entryFile shares its
	// pack's file and is never closed.
	payloadOff int64
	// whole is the entire file, read at once by a direct read (nil for a
	// buffered one); Close returns it to its pool.
	whole *[]byte
}

// openEntry opens the entry file at path for k. The error satisfies
// isNotExist when there is no such file (or no directory above it), wraps
// errCorrupt when the file fails a check, and is an I/O error otherwise.
// Symlinks are not followed: an entry is always a regular file. If the
// file was opened, openEntry returns it even with an error (the caller
// needs its identity to delete a corrupt file safely) and the caller
// closes it.
//
// With direct set, the file is read with direct I/O (O_DIRECT), whole and
// at once, past the page cache; where the kernel refuses that, it is read
// buffered.
func openEntry(path string, k Key, direct bool) (*entryFile, error) {
	flags := os.O_RDONLY | syscall.O_NOFOLLOW
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0)
	if direct && err != nil && isDirectRefused(err) {
		direct = false
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, corruptf("%s is a symlink", path)
		}
		return nil, err
	}
	e := &entryFile{f: f}
	return e, e.check(k, direct)
}

// check reads and checks the header and the file's length, before anything
// is allocated for the payload.
//
// A direct read takes the whole file (at most maxEntrySize, checked
// first) in one call, payload included: one request to the device
// instead of two.
func (e *entryFile) check(k Key, direct bool) error {
	fi, err := e.f.Stat()
	if err != nil {
		return err
	}
	e.fi = fi
	if !fi.Mode().IsRegular() {
		return corruptf("not a regular file (%s)", fi.Mode().Type())
	}
	if fi.Size() < headerSize || fi.Size() > maxEntrySize {
		return corruptf("file of %d bytes, want %d to %d", fi.Size(), headerSize, maxEntrySize)
	}
	var b []byte
	if direct {
		if b, err = e.readWhole(int(fi.Size())); err != nil {
			return err
		}
	}
	if b == nil {
		var hb [headerSize]byte
		if _, err := e.f.ReadAt(hb[:], 0); err != nil {
			return shortRead(err)
		}
		b = hb[:]
	}
	h, err := decodeHeader(b[:headerSize])
	if err != nil {
		return err
	}
	if h.key != k {
		return corruptf("header names %s", h.key)
	}
	if want := int64(headerSize) + int64(h.meta.StoredSize); fi.Size() != want {
		return corruptf("file of %d bytes, header says %d", fi.Size(), want)
	}
	e.hdr = h
	return nil
}

// readPayload reads the stored bytes into dst[:n] and checks their CRC.
// The result aliases dst when its capacity suffices; otherwise it is a
// buffer from rafs/bufpool, which the caller may give back.
func (e *entryFile) readPayload(dst []byte) ([]byte, error) {
	off := int64(headerSize)
	if e.payloadOff != 0 {
		off = e.payloadOff
	}
	n := int(e.hdr.meta.StoredSize)
	if cap(dst) >= n {
		dst = dst[:n]
	} else {
		dst = bufpool.Get(n)
	}
	if e.whole != nil {
		copy(dst, (*e.whole)[headerSize:])
	} else if _, err := e.f.ReadAt(dst, off); err != nil {
		return nil, shortRead(err)
	}
	if got := crc32.Checksum(dst, castagnoli); got != e.hdr.payloadCRC {
		return nil, corruptf("payload crc %08x, want %08x", got, e.hdr.payloadCRC)
	}
	return dst, nil
}

// readWhole reads the file, size bytes by its stat, with direct I/O into
// e.whole. It returns nil bytes and no error when the device refused the
// direct read: f is then buffered, and the caller reads it so.
func (e *entryFile) readWhole(size int) ([]byte, error) {
	bp := getAligned(alignUp(size))
	n, err := preadDirect(e.f, *bp)
	if err != nil {
		putAligned(bp)
		if isDirectRefused(err) && clearDirect(e.f) == nil {
			return nil, nil
		}
		return nil, err
	}
	if n != size {
		putAligned(bp)
		return nil, corruptf("file of %d bytes read as %d: changed in place", size, n)
	}
	*bp = (*bp)[:size]
	e.whole = bp
	return *bp, nil
}

func (e *entryFile) Close() error {
	if e.whole != nil {
		*e.whole = (*e.whole)[:cap(*e.whole)]
		putAligned(e.whole)
		e.whole = nil
	}
	return e.f.Close()
}

// shortRead turns a read that ran out of file into corruption: the length
// was checked, so the file was truncated in place behind the cache's back.
func shortRead(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptf("file shrank while read: %v", err)
	}
	return err
}

// writeEntry stores an entry at final atomically: it writes a temp file in
// final's directory (shard, created if missing) and renames it into place,
// so that readers in any process see the whole entry or none. On error the
// temp file is removed. Concurrent writers of the same entry are harmless:
// the content is the same and the last rename wins.
//
// With direct set, header and payload go to the device in one direct
// write (O_DIRECT) from an aligned copy, padded to the alignment and then
// truncated to the entry's length, so that the entry never passes through
// the page cache. An error for which isDirectRefused holds means the
// kernel refused that; the caller writes again buffered.
//
// The entry gets pm's file mode and group, and any directory it creates
// pm's directory mode and group, before the rename: no other process
// ever sees the entry with others.
//
// It returns the state of the entry file it wrote, when it can tell
// (zero otherwise): the file is its own inode, found at final after the
// rename.
func writeEntry(p paths, pm perm, final string, h header, stored []byte, direct bool) (fileID, error) {
	flags := 0
	if direct {
		flags = syscall.O_DIRECT
	}
	shard := p.shard(h.key)
	f, tmp, err := createTemp(shard, h.key, flags, pm)
	if errors.Is(err, fs.ErrNotExist) {
		if err := pm.mkdirs(p.root, p.chunks, shard); err != nil {
			return fileID{}, err
		}
		f, tmp, err = createTemp(shard, h.key, flags, pm)
	}
	if err != nil {
		return fileID{}, err
	}
	if direct {
		err = writeDirect(f, h, stored)
	} else {
		var hb [headerSize]byte
		encodeHeader(&hb, h)
		_, err = f.Write(hb[:])
		if err == nil {
			_, err = f.Write(stored)
		}
	}
	var ours fileID
	if err == nil {
		if fi, serr := f.Stat(); serr == nil {
			ours, _ = idOf(fi)
		}
	}
	if err := commitTemp(f, tmp, final, err); err != nil {
		return fileID{}, err
	}
	// The rename changed the file's ctime: take the state it has now,
	// if the name still holds this very file.
	if fi, err := os.Lstat(final); err == nil && ours != (fileID{}) {
		if now, ok := idOf(fi); ok && now.dev == ours.dev && now.ino == ours.ino {
			return now, nil
		}
	}
	return fileID{}, nil
}

// commitTemp ends the write of a temporary file: it closes f and, if
// writing (err) and closing succeeded, renames tmp to final, so the file
// appears whole or not at all; otherwise it removes tmp. It returns the
// first error.
func commitTemp(f *os.File, tmp, final string, err error) error {
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// writeDirect writes the entry (h, then stored) to f, opened for direct
// I/O, padded to directAlign, and truncates the padding.
func writeDirect(f *os.File, h header, stored []byte) error {
	size := headerSize + len(stored)
	bp := getAligned(alignUp(size))
	defer putAligned(bp)
	buf := *bp
	encodeHeader((*[headerSize]byte)(buf), h)
	copy(buf[headerSize:], stored)
	clear(buf[size:])
	if _, err := f.Write(buf); err != nil {
		return err
	}
	if len(buf) == size {
		return nil
	}
	return f.Truncate(int64(size))
}

// createTemp creates a new temp file for k's entry in dir, with the extra
// open flags given, and gives it pm's mode and group (whatever the umask):
// readable by the owner, and by pm's group if it has one.
func createTemp(dir string, k Key, flags int, pm perm) (*os.File, string, error) {
	for range 10 {
		name := dir + "/" + tempPrefix + entryName(k) + "-" + strconv.FormatUint(rand.Uint64(), 36)
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|flags, pm.file)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err == nil {
			if err = pm.setFile(f); err != nil {
				f.Close()
				os.Remove(name)
				return nil, "", err
			}
		}
		return f, name, err
	}
	return nil, "", fmt.Errorf("create temp file in %s: too many name collisions", dir)
}
