package rafs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// UnpackOptions configure Unpack and UnpackTar.
type UnpackOptions struct {
	// Workers write regular files in parallel; default 8.
	Workers int
	// Rootless skips ownership and device nodes (for non-root callers);
	// it is set automatically when the process is not root.
	Rootless bool
	Logger   *slog.Logger
	// Progress, if set, is called with bytes of file content written.
	Progress func(n int64)
}

func (o UnpackOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// entry is one name of the tree in walk order.
type entry struct {
	rel string // path relative to the root, "" for the root
	in  Inode
}

// walkEntries lists every name depth first, parents before children, in
// name order. It is bounded by the inode count: the decoder's tree order
// checks rule out cycles.
func walkEntries(b *Bootstrap, fn func(entry) error) error {
	root, err := b.Inode(RootIno)
	if err != nil {
		return err
	}
	type frame struct {
		rel string
		in  Inode
	}
	stack := []frame{{"", root}}
	// In a tree every dirent is read exactly once; a hostile bootstrap
	// that lists a directory twice or shares dirent ranges would make the
	// walk repeat work, so it may read no more dirents than there are.
	budget := b.count(secDirents)
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if err := fn(entry{f.rel, f.in}); err != nil {
			return err
		}
		if !f.in.IsDir() {
			continue
		}
		if uint64(f.in.DataCount) > budget {
			return corruptf("directory %d: entries shared with another directory", f.in.Ino)
		}
		budget -= uint64(f.in.DataCount)
		ents, err := b.ReadDir(f.in.Ino)
		if err != nil {
			return err
		}
		for i := len(ents) - 1; i >= 0; i-- {
			in, err := b.checkChild(f.in, ents[i])
			if err != nil {
				return err
			}
			rel := ents[i].Name
			if f.rel != "" {
				rel = f.rel + "/" + rel
			}
			stack = append(stack, frame{rel, in})
		}
	}
	return nil
}

// Unpack writes the image's merged root filesystem into dest, which must
// not exist or be an empty directory. Nothing is written outside dest: the
// tree holds only validated names, parents are created before children,
// and no existing link is followed. On error dest is removed again.
func Unpack(ctx context.Context, b *Bootstrap, src ChunkSource, dest string, opts UnpackOptions) (err error) {
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if os.Geteuid() != 0 {
		opts.Rootless = true
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := prepareDest(dest); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dest)
		}
	}()
	u := &unpacker{b: b, src: src, dest: dest, opts: opts, first: map[Ino]string{}}
	var files []entry
	var dirs []entry
	err = walkEntries(b, func(e entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(dest, e.rel)
		if first, ok := u.first[e.in.Ino]; ok && !e.in.IsDir() {
			u.links = append(u.links, [2]string{first, p})
			return nil
		}
		u.first[e.in.Ino] = p
		switch {
		case e.in.IsDir():
			dirs = append(dirs, e)
			if e.rel == "" {
				return nil
			}
			if err := unix.Mkdirat(unix.AT_FDCWD, p, 0o700); err != nil {
				return fmt.Errorf("mkdir %s: %w", e.rel, err)
			}
			return nil
		case e.in.IsReg():
			files = append(files, e)
			return nil
		default:
			if err := u.special(p, e); errors.Is(err, errSkip) {
				return nil
			} else if err != nil {
				return err
			}
			return u.meta(p, e.in)
		}
	})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Workers)
	for _, e := range files {
		g.Go(func() error { return u.regular(gctx, e) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, l := range u.links {
		if err := unix.Linkat(unix.AT_FDCWD, l[0], unix.AT_FDCWD, l[1], 0); err != nil {
			return fmt.Errorf("link %s: %w", l[1], err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := u.meta(filepath.Join(dest, dirs[i].rel), dirs[i].in); err != nil {
			return err
		}
	}
	return nil
}

func prepareDest(dest string) error {
	if err := os.Mkdir(dest, 0o700); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", dest, err)
	}
	st, err := os.Lstat(dest)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dest)
	}
	ents, err := os.ReadDir(dest)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s is not empty", dest)
	}
	return nil
}

type unpacker struct {
	b     *Bootstrap
	src   ChunkSource
	dest  string
	opts  UnpackOptions
	first map[Ino]string
	links [][2]string
	bytes atomic.Int64
}

func (u *unpacker) special(p string, e entry) error {
	switch e.in.Mode & ModeType {
	case ModeLink:
		target, err := u.b.Readlink(e.in)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(target, unix.AT_FDCWD, p); err != nil {
			return fmt.Errorf("symlink %s: %w", e.rel, err)
		}
		return nil
	case ModeChr, ModeBlk, ModeSock:
		if u.opts.Rootless && e.in.Mode&ModeType != ModeSock {
			u.opts.Logger.Warn("skipping device node: not root", "path", e.rel)
			delete(u.first, e.in.Ino)
			return errSkip
		}
		fallthrough
	case ModeFifo:
		dev := unix.Mkdev(e.in.RdevMajor, e.in.RdevMinor)
		if err := unix.Mknodat(unix.AT_FDCWD, p, e.in.Mode&ModeType|0o600, int(dev)); err != nil {
			return fmt.Errorf("mknod %s: %w", e.rel, err)
		}
		return nil
	}
	return fmt.Errorf("%s: unexpected mode %#o", e.rel, e.in.Mode)
}

var errSkip = errors.New("skipped")

func (u *unpacker) regular(ctx context.Context, e entry) error {
	p := filepath.Join(u.dest, e.rel)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", e.rel, err)
	}
	defer f.Close()
	buf := make([]byte, 0, u.b.ChunkSize())
	var off int64
	for i := range e.in.DataCount {
		seg, err := u.b.FileSegment(e.in, i)
		if err != nil {
			return fmt.Errorf("%s: %w", e.rel, err)
		}
		buf = buf[:seg.Size]
		if err := u.src.ReadChunk(ctx, seg.Chunk, buf); err != nil {
			return fmt.Errorf("%s: chunk %d: %w", e.rel, i, err)
		}
		if _, err := f.WriteAt(buf[seg.Off:seg.Off+seg.Len], off); err != nil {
			return fmt.Errorf("write %s: %w", e.rel, err)
		}
		off += int64(seg.Len)
		if u.opts.Progress != nil {
			u.opts.Progress(int64(seg.Len))
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", e.rel, err)
	}
	return u.meta(p, e.in)
}

// meta applies ownership, mode, xattrs and mtime, in that order: chown
// clears setuid bits, and everything else would move the mtime.
func (u *unpacker) meta(p string, in Inode) error {
	if !u.opts.Rootless {
		if err := unix.Lchown(p, int(in.UID), int(in.GID)); err != nil {
			return fmt.Errorf("chown %s: %w", p, err)
		}
	}
	if !in.IsSymlink() {
		if err := unix.Fchmodat(unix.AT_FDCWD, p, in.Mode&ModePerm, 0); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	xs, err := u.b.Xattrs(in)
	if err != nil {
		return err
	}
	for _, x := range xs {
		if err := unix.Lsetxattr(p, x.Name, x.Value, 0); err != nil {
			if u.opts.Rootless || errors.Is(err, unix.ENOTSUP) {
				u.opts.Logger.Warn("cannot set xattr", "path", p, "name", x.Name, "err", err)
				continue
			}
			return fmt.Errorf("setxattr %s %s: %w", p, x.Name, err)
		}
	}
	ts := []unix.Timespec{{Sec: in.MtimeSec, Nsec: int64(in.MtimeNsec)}, {Sec: in.MtimeSec, Nsec: int64(in.MtimeNsec)}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times %s: %w", p, err)
	}
	return nil
}
