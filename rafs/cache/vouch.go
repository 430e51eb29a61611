package cache

import (
	"io/fs"
	"sync"
	"syscall"
)

// maxVouched bounds the entries a Cache remembers as verified: 64 bytes
// each, so 4 MiB at most. Past it the memory starts over; entries then
// verify again once on their next read.
const maxVouched = 1 << 16

// fileID identifies one state of an entry file: the file (device and
// inode) and the last change to it. The kernel sets ctime on every write,
// truncation, rename, chmod or utimes of the file, and no caller can set
// it back, so an unchanged ID means unchanged bytes.
type fileID struct {
	dev, ino uint64
	ctimeSec int64
	ctimeNs  int64
	size     int64
}

// idOf is fi's fileID, and false when fi carries no stat data.
func idOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctimeSec: st.Ctim.Sec, ctimeNs: st.Ctim.Nsec, size: st.Size}, true
}

// vouched remembers, per key, the state of the entry file whose bytes this
// Cache knows to be the chunk's: written by its own Put (whose caller
// verified them) or verified by an earlier GetVerified. A GetVerified that
// finds the same file state spares its caller the digest check: hashing
// (and for RAFS chunks decoding) every cached chunk again on every read
// was a tenth of a peer's CPU in a plain pull.
type vouched struct {
	mu sync.Mutex
	m  map[Key]fileID
}

func (v *vouched) add(k Key, id fileID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVouched {
		v.m = make(map[Key]fileID)
	}
	v.m[k] = id
}

func (v *vouched) has(k Key, id fileID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	got, ok := v.m[k]
	return ok && got == id
}

func (v *vouched) forget(k Key) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, k)
}
