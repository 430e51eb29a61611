package erofs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"damselfly/rafs"
)

// The on-disk constants this package writes (see LAYOUT.md). Only the
// uncompressed subset of EROFS is used, so any kernel with EROFS reads it.
const (
	// BlockSize is the image's block size; EROFS needs it to equal the
	// page size to mount, which is 4 KiB on the machines damselfly runs on.
	BlockSize = 4096
	blockBits = 12

	superMagic  = 0xE0F5E1E2
	superOffset = 1024
	superSize   = 128

	// inodeSize is the extended inode, used for every inode: 32-bit ids,
	// 64-bit sizes and a per-inode mtime in nanoseconds.
	inodeSize  = 64
	inodeAlign = 32 // nid = byte offset / 32 (meta_blkaddr is 0)

	direntSize = 12

	xattrHeaderSize = 12
	xattrEntrySize  = 4

	layoutFlatPlain  = 0
	layoutFlatInline = 2
)

// Dirent file types.
const (
	ftUnknown = iota
	ftReg
	ftDir
	ftChr
	ftBlk
	ftFifo
	ftSock
	ftSymlink
)

// ErrUnsupported is returned (wrapped, with what) for a bootstrap this
// package cannot express as an EROFS image, such as an xattr whose name
// has no EROFS name index. Callers fall back to serving it another way.
var ErrUnsupported = errors.New("erofs: not expressible as an EROFS image")

func fileType(mode uint32) uint8 {
	switch mode & rafs.ModeType {
	case rafs.ModeReg:
		return ftReg
	case rafs.ModeDir:
		return ftDir
	case rafs.ModeChr:
		return ftChr
	case rafs.ModeBlk:
		return ftBlk
	case rafs.ModeFifo:
		return ftFifo
	case rafs.ModeSock:
		return ftSock
	case rafs.ModeLink:
		return ftSymlink
	}
	return ftUnknown
}

// xattrPrefixes are EROFS's xattr name indexes: an entry stores the index
// and the rest of the name. The two ACL names are whole names.
var xattrPrefixes = []struct {
	index  uint8
	prefix string
}{
	{2, "system.posix_acl_access"},
	{3, "system.posix_acl_default"},
	{1, "user."},
	{4, "trusted."},
	{5, "lustre."},
	{6, "security."},
}

// encodeXattrs returns the inline xattr body of an inode (header and
// entries), or nil for none. Entries keep the bootstrap's order (sorted
// by name).
func encodeXattrs(xs []rafs.Xattr) ([]byte, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	out := make([]byte, xattrHeaderSize)
	for _, x := range xs {
		idx, suffix, ok := splitXattrName(x.Name)
		if !ok {
			return nil, fmt.Errorf("xattr %q: %w: no EROFS name index for it", x.Name, ErrUnsupported)
		}
		if len(suffix) > 255 || len(x.Value) > 0xffff {
			return nil, fmt.Errorf("xattr %q: %w: name or value too long", x.Name, ErrUnsupported)
		}
		var e [xattrEntrySize]byte
		e[0] = uint8(len(suffix))
		e[1] = idx
		binary.LittleEndian.PutUint16(e[2:], uint16(len(x.Value)))
		out = append(out, e[:]...)
		out = append(out, suffix...)
		out = append(out, x.Value...)
		for len(out)%xattrEntrySize != 0 {
			out = append(out, 0)
		}
	}
	if (len(out)-xattrHeaderSize)/4+1 > 0xffff {
		return nil, fmt.Errorf("%w: %d bytes of xattrs on one inode", ErrUnsupported, len(out))
	}
	return out, nil
}

func splitXattrName(name string) (uint8, string, bool) {
	for _, p := range xattrPrefixes {
		if p.index == 2 || p.index == 3 {
			if name == p.prefix {
				return p.index, "", true
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, p.prefix); ok && rest != "" {
			return p.index, rest, true
		}
	}
	return 0, "", false
}

// xattrCount is i_xattr_icount for an xattr body of n bytes: the header
// counts as one 4-byte slot.
func xattrCount(n int) uint16 {
	if n == 0 {
		return 0
	}
	return uint16((n-xattrHeaderSize)/4 + 1)
}

// inodeRecord is what putInode writes.
type inodeRecord struct {
	layout  uint16
	xattrs  int // bytes of the inline xattr body
	mode    uint32
	size    uint64
	u       uint32 // raw_blkaddr or rdev
	ino     uint32
	uid     uint32
	gid     uint32
	mtime   int64
	mtimeNs uint32
	nlink   uint32
}

// putInode encodes an extended inode into b (64 bytes).
func putInode(b []byte, r inodeRecord) {
	le := binary.LittleEndian
	le.PutUint16(b[0:], 1|r.layout<<1) // bit 0: extended form
	le.PutUint16(b[2:], xattrCount(r.xattrs))
	le.PutUint16(b[4:], uint16(r.mode))
	le.PutUint16(b[6:], 0)
	le.PutUint64(b[8:], r.size)
	le.PutUint32(b[16:], r.u)
	le.PutUint32(b[20:], r.ino)
	le.PutUint32(b[24:], r.uid)
	le.PutUint32(b[28:], r.gid)
	le.PutUint64(b[32:], uint64(r.mtime))
	le.PutUint32(b[40:], r.mtimeNs)
	le.PutUint32(b[44:], r.nlink)
	clear(b[48:64])
}

// encodeDev is the kernel's new_encode_dev, the form of i_u.rdev.
func encodeDev(major, minor uint32) uint32 {
	return minor&0xff | major<<8 | (minor&^0xff)<<12
}

// superblock holds the fields putSuper writes; the rest are zero.
type superblock struct {
	rootNid uint16
	inodes  uint64
	blocks  uint32
	uuid    [16]byte
}

func putSuper(b []byte, s superblock) {
	le := binary.LittleEndian
	clear(b[:superSize])
	le.PutUint32(b[0:], superMagic)
	b[12] = blockBits
	le.PutUint16(b[14:], s.rootNid)
	le.PutUint64(b[16:], s.inodes)
	le.PutUint32(b[36:], s.blocks)
	le.PutUint32(b[40:], 0) // meta_blkaddr: nids count from byte 0
	copy(b[48:64], s.uuid[:])
	copy(b[64:80], "damselfly")
}
