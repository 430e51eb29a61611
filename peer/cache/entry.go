package cache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"

	"damselfly/rafs"
)

// entryFile is an open entry whose header and length have been checked.
// Its payload is checked (CRC) when read.
type entryFile struct {
	f   *os.File
	fi  fs.FileInfo
	hdr header
}

// openEntry opens the entry file at path for d. The error satisfies
// isNotExist when there is no such file (or no directory above it), wraps
// errCorrupt when the file fails a check, and is an I/O error otherwise.
// Symlinks are not followed: an entry is always a regular file. If the
// file was opened, openEntry returns it even with an error (the caller
// needs its identity to delete a corrupt file safely) and the caller
// closes it.
func openEntry(path string, d rafs.Digest) (*entryFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, corruptf("%s is a symlink", path)
		}
		return nil, err
	}
	e := &entryFile{f: f}
	return e, e.check(d)
}

// check reads and checks the header and the file's length, before anything
// is allocated for the payload.
func (e *entryFile) check(d rafs.Digest) error {
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
	var b [headerSize]byte
	if _, err := e.f.ReadAt(b[:], 0); err != nil {
		return shortRead(err)
	}
	h, err := decodeHeader(b[:])
	if err != nil {
		return err
	}
	if h.digest != d {
		return corruptf("header names %s", h.digest)
	}
	if want := int64(headerSize) + int64(h.meta.StoredSize); fi.Size() != want {
		return corruptf("file of %d bytes, header says %d", fi.Size(), want)
	}
	e.hdr = h
	return nil
}

// readPayload appends the stored bytes to dst[:0] and checks their CRC.
// The result aliases dst when its capacity suffices.
func (e *entryFile) readPayload(dst []byte) ([]byte, error) {
	n := int(e.hdr.meta.StoredSize)
	dst = slices.Grow(dst[:0], n)[:n]
	if _, err := e.f.ReadAt(dst, headerSize); err != nil {
		return nil, shortRead(err)
	}
	if got := crc32.Checksum(dst, castagnoli); got != e.hdr.payloadCRC {
		return nil, corruptf("payload crc %08x, want %08x", got, e.hdr.payloadCRC)
	}
	return dst, nil
}

func (e *entryFile) Close() error { return e.f.Close() }

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
func writeEntry(shard, final string, h header, stored []byte) error {
	f, tmp, err := createTemp(shard, h.digest)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(shard, 0o755); err != nil {
			return err
		}
		f, tmp, err = createTemp(shard, h.digest)
	}
	if err != nil {
		return err
	}
	var hb [headerSize]byte
	encodeHeader(&hb, h)
	_, err = f.Write(hb[:])
	if err == nil {
		_, err = f.Write(stored)
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
	return nil
}

// createTemp creates a new temp file for d's entry in dir, readable by the
// other processes that share the cache.
func createTemp(dir string, d rafs.Digest) (*os.File, string, error) {
	for range 10 {
		name := dir + "/" + tempPrefix + hex.EncodeToString(d[:]) + "-" + strconv.FormatUint(rand.Uint64(), 36)
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", fmt.Errorf("create temp file in %s: too many name collisions", dir)
}
