package fusemount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"damselfly/rafs"
)

// backingFiles registers files with the kernel for FUSE passthrough;
// *fuse.Server implements it.
type backingFiles interface {
	RegisterBackingFd(*fuse.BackingMap) (int32, syscall.Errno)
	UnregisterBackingFd(id int32) syscall.Errno
}

var _ backingFiles = (*fuse.Server)(nil)

// localChunks reads chunks that are already on this node, never from a
// backend; the Fetcher implements it.
type localChunks interface {
	// HasLocal reports whether c is in memory or the node cache now.
	HasLocal(c rafs.Chunk) bool
	// LocalChunk returns the verified decoded bytes of c (c.Size of
	// them) from memory or the node cache, with a reference the caller
	// drops, or false. The caller must not modify them.
	LocalChunk(c rafs.Chunk) (*decoded, bool)
}

var _ localChunks = (*Fetcher)(nil)

// passthrough opens regular files whose copy is in the file copy store
// in FUSE passthrough mode: the kernel reads (and maps) the copy itself,
// and no READ for the file reaches the daemon while it is open. Files
// without a copy are opened as before; when the last of their handles
// closes and every chunk of the file is on the node, a background fill
// writes the copy from those verified chunks for the next open.
//
// The kernel puts an inode in one I/O mode at a time: while a file is
// open through the page cache, an open in passthrough mode fails (the
// reader gets EIO), and the reverse; and every passthrough open of an
// inode must name the same backing file. So passthrough counts the open
// handles of each inode by mode: an open joins the mode the inode is in
// (with the same backing ID), and only an inode with no open handle
// changes mode. Safe for concurrent use.
type passthrough struct {
	b      *rafs.Bootstrap
	copies *fileCopies
	local  localChunks
	m      *Metrics
	log    *slog.Logger
	reg    atomic.Pointer[registrar] // set at INIT (rafsFS.Init)
	off    atomic.Bool               // registering failed for good (no privilege, stacking)

	mu     sync.Mutex
	inodes map[rafs.Ino]*inodeIO

	// The files waiting for a copy, in order, each at most once (so at
	// most one per inode of the image); wake has a token while it is not
	// empty.
	qmu     sync.Mutex
	queue   []rafs.Inode
	pending map[rafs.Ino]bool // queued or being filled
	wake    chan struct{}
	// chunks keeps the last chunks a fill decoded: small files share
	// chunks (a 1 MiB chunk holds some thirty files of the Debian tree),
	// and fills come in about the order the files were read, so without
	// it every small file decoded its whole chunk again from the node
	// cache, thirty decodes per chunk.
	chunks *memory
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// inodeIO counts the open handles of one inode by the mode they were
// opened in.
type inodeIO struct {
	cached int   // through the daemon's READ
	pass   int   // in passthrough mode on backing file id
	id     int32 // valid while pass > 0
}

// fillChunkBytes bounds the decoded chunks fills keep.
const fillChunkBytes = 8 << 20

func newPassthrough(b *rafs.Bootstrap, copies *fileCopies, local localChunks, m *Metrics, log *slog.Logger) *passthrough {
	ctx, stop := context.WithCancel(context.Background())
	p := &passthrough{b: b, copies: copies, local: local, m: m, log: log, inodes: map[rafs.Ino]*inodeIO{},
		pending: map[rafs.Ino]bool{}, wake: make(chan struct{}, 1), ctx: ctx, stop: stop, chunks: newMemory(fillChunkBytes)}
	p.wg.Add(1)
	go p.filler()
	return p
}

// Close stops the fill and waits for it.
func (p *passthrough) Close() {
	p.stop()
	p.wg.Wait()
}

// registrar holds what registers backing files.
type registrar struct{ backingFiles }

// enable is called at INIT with what registers backing files (the
// server).
func (p *passthrough) enable(reg backingFiles) { p.reg.Store(&registrar{reg}) }

// active reports whether opens may be answered in passthrough mode.
func (p *passthrough) active() bool { return p != nil && p.reg.Load() != nil && !p.off.Load() }

// open decides how a handle of in is opened: in passthrough mode on the
// returned backing ID, or (false) through the daemon. Every open must be
// matched by one release with the same answer.
func (p *passthrough) open(in rafs.Inode) (int32, bool) {
	if in.Size == 0 {
		// Nothing to read: the kernel sends no READ for an empty file,
		// so a copy would only cost a lookup and two ioctls.
		return 0, false
	}
	p.mu.Lock()
	st := p.inodes[in.Ino]
	switch {
	case st != nil && st.pass > 0:
		st.pass++
		p.mu.Unlock()
		p.m.passthroughOpens.Inc()
		return st.id, true
	case st != nil && st.cached > 0:
		st.cached++
		p.mu.Unlock()
		return 0, false
	}
	p.mu.Unlock()

	// No handle open: the inode may take either mode. The copy is
	// opened and registered outside the lock (a disk lookup); an open
	// of the same inode meanwhile is settled below.
	id, ok := p.register(in)
	p.mu.Lock()
	st = p.inodes[in.Ino]
	if st == nil {
		st = &inodeIO{}
		p.inodes[in.Ino] = st
	}
	var drop int32
	switch {
	case st.pass > 0:
		drop = id
		st.pass++
		id, ok = st.id, true
	case st.cached > 0 || !ok:
		drop = id
		st.cached++
		ok = false
	default:
		st.pass, st.id = 1, id
	}
	p.mu.Unlock()
	if drop != 0 {
		p.unregister(drop)
	}
	if ok {
		p.m.passthroughOpens.Inc()
	}
	return id, ok
}

// register opens the copy of in and registers it with the kernel.
func (p *passthrough) register(in rafs.Inode) (int32, bool) {
	if !p.active() {
		return 0, false
	}
	name, err := fileCopyName(p.b, in)
	if err != nil {
		return 0, false
	}
	fd, ok := p.copies.Open(name, in.Size)
	if !ok {
		return 0, false
	}
	// The kernel keeps its own reference to the file: this descriptor
	// is not needed past the ioctl.
	id, errno := p.reg.Load().RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	syscall.Close(fd)
	if errno != 0 {
		// EPERM (not privileged), ELOOP (the copies live on a stacked
		// filesystem), EOPNOTSUPP: none gets better by trying again.
		if p.off.CompareAndSwap(false, true) {
			p.log.Warn("FUSE passthrough refused by the kernel; serving every read through the daemon", "err", errno)
		}
		return 0, false
	}
	return id, true
}

func (p *passthrough) unregister(id int32) {
	if errno := p.reg.Load().UnregisterBackingFd(id); errno != 0 {
		p.log.Warn("FUSE passthrough: unregistering a backing file failed", "id", id, "err", errno)
	}
}

// release ends a handle of in opened as open answered (pass). When the
// last handle opened through the daemon closes, the file's copy is
// queued if it has none.
func (p *passthrough) release(in rafs.Inode, pass bool) {
	if in.Size == 0 {
		return // open kept no count
	}
	p.mu.Lock()
	st := p.inodes[in.Ino]
	if st == nil {
		p.mu.Unlock()
		return
	}
	var drop int32
	fill := false
	if pass {
		if st.pass--; st.pass == 0 {
			drop = st.id
		}
	} else if st.cached--; st.cached == 0 {
		fill = true
	}
	if st.pass <= 0 && st.cached <= 0 {
		delete(p.inodes, in.Ino)
	}
	p.mu.Unlock()
	if drop != 0 {
		p.unregister(drop)
	}
	if fill && p.active() {
		p.queueFill(in)
	}
}

// queueFill asks the filler for a copy of in, unless one is queued.
func (p *passthrough) queueFill(in rafs.Inode) {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if p.pending[in.Ino] {
		return
	}
	p.pending[in.Ino] = true
	p.queue = append(p.queue, in)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// next takes the first file off the queue.
func (p *passthrough) next() (rafs.Inode, bool) {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if len(p.queue) == 0 {
		p.queue = nil // let a long queue's array go
		return rafs.Inode{}, false
	}
	in := p.queue[0]
	p.queue = p.queue[1:]
	return in, true
}

func (p *passthrough) filler() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for p.ctx.Err() == nil {
			in, ok := p.next()
			if !ok {
				break
			}
			if err := p.fill(in); err != nil && !errors.Is(err, errNotLocal) && p.ctx.Err() == nil {
				p.log.Debug("file copy not written", "inode", in.Ino, "err", err)
			}
			p.qmu.Lock()
			delete(p.pending, in.Ino)
			p.qmu.Unlock()
		}
	}
}

// errNotLocal: a chunk of the file is not on the node; no copy is made
// (making one never fetches).
var errNotLocal = errors.New("not every chunk of the file is on the node")

// fill writes the copy of in from its chunks in memory or the node
// cache, if it has none and every chunk is there.
func (p *passthrough) fill(in rafs.Inode) error {
	if int64(in.Size) > p.copies.capacity {
		return errCopyTooBig
	}
	name, err := fileCopyName(p.b, in)
	if err != nil {
		return err
	}
	if p.copies.Has(name) {
		return nil
	}
	if _, err := os.Stat(p.copies.path(name)); err == nil {
		return nil // another daemon's; Open indexes it
	}
	for i := range in.DataCount {
		seg, err := p.b.FileSegment(in, i)
		if err != nil {
			return err
		}
		if !p.chunks.Contains(seg.Index) && !p.local.HasLocal(seg.Chunk) {
			return errNotLocal
		}
	}
	err = p.copies.Put(name, in.Size, func(w io.Writer) error {
		for i := range in.DataCount {
			if p.ctx.Err() != nil {
				return p.ctx.Err()
			}
			seg, err := p.b.FileSegment(in, i)
			if err != nil {
				return err
			}
			d, ok := p.chunks.Get(seg.Index)
			if !ok {
				if d, ok = p.local.LocalChunk(seg.Chunk); !ok {
					return errNotLocal
				}
				p.chunks.Add(seg.Index, d.hold())
			}
			data := d.b
			if int(seg.Off)+int(seg.Len) > len(data) {
				d.drop()
				return fmt.Errorf("chunk %s: stretch %d+%d outside %d bytes", seg.Digest, seg.Off, seg.Len, len(data))
			}
			_, err = w.Write(data[seg.Off : seg.Off+seg.Len])
			d.drop()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		p.m.fileCopies.Inc()
	}
	return err
}
