package rafs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"
)

// FS is a read-only io/fs view of an image: metadata from the bootstrap,
// file contents from a ChunkSource. Open follows symlinks as a chroot
// would (never leaving the image root); Lstat and ReadLink do not. It is
// safe for concurrent use.
type FS struct {
	b   *Bootstrap
	src ChunkSource
	ctx context.Context
}

var (
	_ fs.FS         = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadLinkFS = (*FS)(nil)
)

// NewFS returns the view. ctx bounds every chunk read made through it (the
// io/fs interfaces carry no context of their own).
func NewFS(ctx context.Context, b *Bootstrap, src ChunkSource) *FS {
	return &FS{b: b, src: src, ctx: ctx}
}

// Bootstrap returns the bootstrap behind the view.
func (f *FS) Bootstrap() *Bootstrap { return f.b }

// resolve walks name from the root. Symlinks in the middle are always
// followed; the last component is followed when follow is set.
func (f *FS) resolve(op, name string, follow bool) (Inode, error) {
	if !fs.ValidPath(name) {
		return Inode{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	hops := 0
	in, err := f.walk(RootIno, name, follow, &hops)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return Inode{}, &fs.PathError{Op: op, Path: name, Err: err}
		}
		return Inode{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return in, nil
}

func (f *FS) walk(dir Ino, p string, follow bool, hops *int) (Inode, error) {
	cur, err := f.b.Inode(dir)
	if err != nil {
		return Inode{}, err
	}
	if strings.HasPrefix(p, "/") {
		if cur, err = f.b.Inode(RootIno); err != nil {
			return Inode{}, err
		}
	}
	parts := strings.Split(p, "/")
	for i, name := range parts {
		switch name {
		case "", ".":
			continue
		case "..":
			if cur, err = f.b.Inode(cur.Parent); err != nil {
				return Inode{}, err
			}
			continue
		}
		if !cur.IsDir() {
			return Inode{}, fs.ErrNotExist
		}
		next, err := f.b.Lookup(cur.Ino, name)
		if err != nil {
			return Inode{}, err
		}
		last := i == len(parts)-1
		if next.IsSymlink() && (!last || follow) {
			if *hops++; *hops > symlinkHops {
				return Inode{}, fmt.Errorf("too many levels of symbolic links")
			}
			target, err := f.b.Readlink(next)
			if err != nil {
				return Inode{}, err
			}
			if next, err = f.walk(cur.Ino, target, true, hops); err != nil {
				return Inode{}, err
			}
		}
		cur = next
	}
	return cur, nil
}

// Open implements fs.FS.
func (f *FS) Open(name string) (fs.File, error) {
	in, err := f.resolve("open", name, true)
	if err != nil {
		return nil, err
	}
	return &file{fs: f, in: in, name: path.Base(name)}, nil
}

// Stat implements fs.StatFS.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	in, err := f.resolve("stat", name, true)
	if err != nil {
		return nil, err
	}
	return fileInfo{in: in, name: path.Base(name)}, nil
}

// Lstat implements fs.ReadLinkFS.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	in, err := f.resolve("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return fileInfo{in: in, name: path.Base(name)}, nil
}

// ReadLink implements fs.ReadLinkFS.
func (f *FS) ReadLink(name string) (string, error) {
	in, err := f.resolve("readlink", name, false)
	if err != nil {
		return "", err
	}
	if !in.IsSymlink() {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return f.b.Readlink(in)
}

// ReadDir implements fs.ReadDirFS.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	in, err := f.resolve("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if !in.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errNotDir}
	}
	return f.dirEntries(name, in)
}

func (f *FS) dirEntries(name string, in Inode) ([]fs.DirEntry, error) {
	ents, err := f.b.ReadDir(in.Ino)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, 0, len(ents))
	for _, e := range ents {
		child, err := f.b.checkChild(in, e)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
		out = append(out, fs.FileInfoToDirEntry(fileInfo{in: child, name: e.Name}))
	}
	return out, nil
}

// fileInfo adapts an Inode; Sys returns the Inode.
type fileInfo struct {
	in   Inode
	name string
}

func (i fileInfo) Name() string {
	if i.name == "/" || i.name == "" {
		return "."
	}
	return i.name
}
func (i fileInfo) Size() int64        { return int64(i.in.Size) }
func (i fileInfo) Mode() fs.FileMode  { return i.in.FileMode() }
func (i fileInfo) ModTime() time.Time { return time.Unix(i.in.MtimeSec, int64(i.in.MtimeNsec)) }
func (i fileInfo) IsDir() bool        { return i.in.IsDir() }
func (i fileInfo) Sys() any           { return i.in }

// file is an open file or directory of an FS.
type file struct {
	fs     *FS
	in     Inode
	name   string
	off    int64
	dirPos int
	dirEnt []fs.DirEntry
	mu     sync.Mutex
	cached int64 // 1 + index of the chunk held in buf; 0 for none
	buf    []byte
}

var (
	_ fs.ReadDirFile = (*file)(nil)
	_ io.ReaderAt    = (*file)(nil)
	_ io.Seeker      = (*file)(nil)
)

func (f *file) Stat() (fs.FileInfo, error) { return fileInfo{in: f.in, name: f.name}, nil }
func (f *file) Close() error               { f.buf = nil; return nil }

func (f *file) Read(p []byte) (int, error) {
	if f.in.IsDir() {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: errors.New("is a directory")}
	}
	n, err := f.ReadAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *file) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += int64(f.in.Size)
	default:
		return 0, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek: negative offset %d", offset)
	}
	f.off = offset
	return offset, nil
}

// ReadAt reads through the chunks covering [off, off+len(p)). The last
// chunk read is kept for the next call; parallel calls are safe.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if !f.in.IsReg() || off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrInvalid}
	}
	size := int64(f.in.Size)
	if off >= size {
		return 0, io.EOF
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cs := int64(f.fs.b.ChunkSize())
	n := 0
	for n < len(p) && off < size {
		idx := off / cs
		if f.cached != idx+1 {
			seg, err := f.fs.b.FileSegment(f.in, uint32(idx))
			if err != nil {
				return n, &fs.PathError{Op: "read", Path: f.name, Err: err}
			}
			if cap(f.buf) < int(seg.Size) {
				f.buf = make([]byte, seg.Size)
			}
			f.buf = f.buf[:seg.Size]
			f.cached = 0
			if err := f.fs.src.ReadChunk(f.fs.ctx, seg.Chunk, f.buf); err != nil {
				return n, &fs.PathError{Op: "read", Path: f.name, Err: err}
			}
			f.buf = f.buf[seg.Off : seg.Off+seg.Len]
			f.cached = idx + 1
		}
		k := copy(p[n:], f.buf[off-idx*cs:])
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) ReadDir(count int) ([]fs.DirEntry, error) {
	if !f.in.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: errNotDir}
	}
	if f.dirEnt == nil {
		ents, err := f.fs.dirEntries(f.name, f.in)
		if err != nil {
			return nil, err
		}
		f.dirEnt = ents
	}
	rest := f.dirEnt[f.dirPos:]
	if count <= 0 {
		f.dirPos = len(f.dirEnt)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if count > len(rest) {
		count = len(rest)
	}
	f.dirPos += count
	return rest[:count], nil
}
