package fusemount

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"damselfly/rafs"
	"damselfly/rafs/erofs"
)

// The lazy kernel mount: the mount is the kernel's EROFS from the start,
// over a loop device whose backing file is the image's EROFS image
// (rafs/erofs) served by this daemon through a private FUSE mount of one
// file. Lookups, opens, attributes and directory reads are the kernel's;
// only the image's blocks the kernel has not read yet reach the daemon,
// as large reads of one file (the loop device uses direct I/O), fetched
// and verified through the Fetcher as any read.

// imageNode is the one file of the private FUSE mount.
type imageNode struct {
	fs.Inode
	im  *erofs.Image
	b   *rafs.Bootstrap
	src rafs.ChunkSource
	log *slog.Logger
}

var (
	_ fs.NodeGetattrer = (*imageNode)(nil)
	_ fs.NodeOpener    = (*imageNode)(nil)
	_ fs.NodeReader    = (*imageNode)(nil)
)

func (n *imageNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o400
	out.Size = uint64(n.im.Size())
	out.Blocks = uint64(n.im.Size()) / 512
	return 0
}

func (n *imageNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *imageNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= n.im.Size() {
		return fuse.ReadResultData(nil), 0
	}
	size := int(min(int64(len(dest)), n.im.Size()-off))
	viewer, ok := n.src.(ChunkViewer)
	if !ok {
		k, err := n.im.ReadAt(ctx, dest[:size], off, n.src)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		return fuse.ReadResultData(dest[:k]), 0
	}
	// Written with writev from the metadata, the decoded chunks and a
	// block of zeros: no copy in this process.
	ra, _ := n.src.(Readaheader)
	cs := uint64(n.b.ChunkSize())
	v := &viewed{}
	err := n.im.Pieces(off, size, func(pc erofs.Piece) error {
		switch {
		case pc.Meta != nil:
			v.vecs = append(v.vecs, pc.Meta)
		case pc.File == nil:
			v.vecs = append(v.vecs, zeroBlock[:pc.Len])
		default:
			in := pc.File.Inode
			idx := pc.FileOff / cs
			seg, err := n.b.FileSegment(in, uint32(idx))
			if err != nil {
				return err
			}
			data, done, err := viewer.ViewChunk(ctx, seg.Chunk)
			if err != nil {
				return err
			}
			at := int(seg.Off) + int(pc.FileOff-idx*cs)
			v.vecs = append(v.vecs, data[at:at+pc.Len])
			v.done = append(v.done, done)
			if ra != nil && pc.FileOff == idx*cs && idx+1 < uint64(in.DataCount) {
				// The first read of the file's chunk idx: fetch the
				// chunks after it while the kernel asks for this one.
				ra.Readahead(in, uint32(idx))
			}
		}
		return nil
	})
	if err != nil {
		v.Done()
		if ctx.Err() != nil {
			return nil, syscall.EINTR
		}
		n.log.Error("image read failed", "offset", off, "bytes", size, "err", err)
		return nil, syscall.EIO
	}
	return v, 0
}

// zeroBlock pads a file's last block in replies.
var zeroBlock [erofs.BlockSize]byte

type imageRoot struct {
	fs.Inode
	file *imageNode
}

func (r *imageRoot) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, r.file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	r.AddChild("image", ch, false)
}

// lazyKernel is a mounted lazy kernel mount's parts.
type lazyKernel struct {
	server *fuse.Server
	dir    string // the private FUSE mount
	loop   string // /dev/loopN
	loopFd int    // held until teardown, for LOOP_CHANGE_FD
	served chan struct{}
	fuseUp bool // the private mount is still mounted
}

// loopChangeFD is LOOP_CHANGE_FD of linux/loop.h (golang.org/x/sys does
// not name it): a read-only loop device switches to another backing file
// of the same size, under its users.
const loopChangeFD = 0x4C06

// swapTo moves the loop device onto the kernel image at path, which
// holds the same bytes as the image file this daemon serves: from then
// on no read of the mount reaches the daemon. The private mount is then
// unused and taken down.
func (lk *lazyKernel) swapTo(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(lk.loopFd, loopChangeFD, fd); err != nil {
		return fmt.Errorf("LOOP_CHANGE_FD %s to %s: %w", lk.loop, path, err)
	}
	lk.stopFUSE()
	return nil
}

// startLazyKernel mounts the image's EROFS at mp over a loop device
// backed by this daemon. On error nothing is left mounted.
func (d *Daemon) startLazyKernel(mp string) (_ *lazyKernel, err error) {
	im, err := erofs.Build(d.boot)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(mp))
	dir := filepath.Join(runDir(), "image-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	root := &imageRoot{file: &imageNode{im: im, b: d.boot, src: d.fetcher, log: d.log}}
	timeout := time.Hour
	server, err := fuse.NewServer(fs.NewNodeFS(root, &fs.Options{EntryTimeout: &timeout, AttrTimeout: &timeout}), dir, &fuse.MountOptions{
		FsName: "damselfly-image:" + d.image, Name: "damselfly", Options: []string{"ro"},
		DirectMount: true, MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, MaxBackground: 64,
		// The loop device reads with direct I/O from a kernel worker:
		// without async direct I/O each read would hold the worker
		// until its reply, one read at a time.
		ExtraCapabilities: fuse.CAP_ASYNC_DIO,
	})
	if err != nil {
		return nil, fmt.Errorf("image file mount: %w", err)
	}
	lk := &lazyKernel{server: server, dir: dir, served: make(chan struct{}), loopFd: -1, fuseUp: true}
	go func() { server.Serve(); close(lk.served) }()
	defer func() {
		if err != nil {
			lk.close()
		}
	}()
	// A raw open: this daemon must never register a file of its own
	// mount with Go's poller (the kernel would send it POLL requests).
	fd, err := unix.Open(filepath.Join(dir, "image"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open image file: %w", err)
	}
	defer unix.Close(fd)
	loopFd, dev, err := attachLoop(fd)
	if err != nil {
		return nil, err
	}
	lk.loopFd, lk.loop = loopFd, dev
	if err := unix.Mount(dev, mp, "erofs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		unix.IoctlSetInt(loopFd, unix.LOOP_CLR_FD, 0)
		return nil, fmt.Errorf("mount erofs from %s: %w", dev, err)
	}
	if err := os.WriteFile(filepath.Join("/sys/block", filepath.Base(dev), "queue/read_ahead_kb"), []byte("1024"), 0); err != nil {
		d.log.Debug("loop device readahead left as it is", "dev", dev, "err", err)
	}
	return lk, nil
}

// attachLoop binds a free loop device to fd: read-only, direct I/O, 4 KiB
// blocks, detached when its last user (the EROFS mount) lets go.
func attachLoop(fd int) (int, string, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("loop control: %w", err)
	}
	defer unix.Close(ctl)
	for range 8 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return -1, "", fmt.Errorf("free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lfd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(fd), Size: erofs.BlockSize}
		cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		err = unix.IoctlLoopConfigure(lfd, &cfg)
		if err == nil {
			return lfd, dev, nil
		}
		unix.Close(lfd)
		if !errors.Is(err, unix.EBUSY) {
			return -1, "", fmt.Errorf("configure %s: %w", dev, err)
		}
		// Another process took it between the two calls.
	}
	return -1, "", errors.New("no free loop device after 8 tries")
}

// stopFUSE unmounts the private image mount, once, and waits for its
// server.
func (lk *lazyKernel) stopFUSE() {
	if !lk.fuseUp {
		return
	}
	lk.fuseUp = false
	if err := lk.server.Unmount(); err != nil {
		unix.Unmount(lk.dir, unix.MNT_DETACH)
	}
	<-lk.served
	os.Remove(lk.dir)
}

// close lets the loop device go (it detaches once the mount has let go
// too) and takes the private mount down.
func (lk *lazyKernel) close() {
	if lk.loopFd >= 0 {
		unix.Close(lk.loopFd)
		lk.loopFd = -1
	}
	lk.stopFUSE()
}
