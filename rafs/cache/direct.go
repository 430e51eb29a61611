package cache

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"damselfly/rafs"
)

// directAlign is what direct I/O needs file offsets, lengths and memory
// aligned to. The logical block size of the usual block devices (512 or
// 4096 bytes) divides it; where it does not, the kernel refuses with
// EINVAL and the cache falls back to buffered I/O.
const directAlign = 4096

// alignUp rounds n up to a multiple of directAlign.
func alignUp(n int) int { return (n + directAlign - 1) &^ (directAlign - 1) }

// alignedPool holds directAlign-aligned buffers for direct reads and
// writes of whole entry files.
var alignedPool = sync.Pool{New: func() any { return new([]byte) }}

// getAligned returns a pooled aligned buffer of length n (a multiple of
// directAlign); putAligned gives it back.
func getAligned(n int) *[]byte {
	bp := alignedPool.Get().(*[]byte)
	if cap(*bp) < n {
		*bp = alignedBuf(n)
	}
	*bp = (*bp)[:n]
	return bp
}

func putAligned(bp *[]byte) { alignedPool.Put(bp) }

// alignedBuf allocates n bytes starting at a multiple of directAlign.
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % directAlign); r != 0 {
		off = directAlign - r
	}
	return b[off : off+n : off+n]
}

// isDirectRefused reports whether err is the kernel refusing direct I/O:
// EINVAL from open on a file system without it, or from a read or write
// whose alignment the device does not accept.
func isDirectRefused(err error) bool { return errors.Is(err, syscall.EINVAL) }

// probeDirect reports whether the file system under dir takes direct
// writes of directAlign-aligned blocks, by writing one to a temp file
// there (named as the all-zero digest's) and deleting it. Only a refusal (EINVAL) counts as no: any other
// error (no space, no permission) is for the real writes to report.
func probeDirect(dir string) bool {
	f, name, err := createTemp(dir, SHA256(rafs.Digest{}), syscall.O_DIRECT, newPerm(-1))
	if err != nil {
		return !isDirectRefused(err)
	}
	defer os.Remove(name)
	defer f.Close()
	bp := getAligned(directAlign)
	defer putAligned(bp)
	clear(*bp)
	_, err = f.Write(*bp)
	return err == nil || !isDirectRefused(err)
}

// preadDirect reads the file from offset 0 into buf (aligned, its length
// a multiple of directAlign) with one pread, restarted after EINTR, and
// returns the count, which is short at the end of the file.
func preadDirect(f *os.File, buf []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = unix.Pread(int(fd), buf, 0)
			if rerr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, &os.PathError{Op: "pread", Path: f.Name(), Err: rerr}
	}
	return n, nil
}

// clearDirect turns direct I/O off on f, for a read the device refused.
func clearDirect(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		var fl int
		if fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0); ferr == nil {
			_, ferr = unix.FcntlInt(fd, unix.F_SETFL, fl&^unix.O_DIRECT)
		}
	}); err != nil {
		return err
	}
	return ferr
}
