package fusemount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"damselfly/rafs"
)

// rafsFS serves a bootstrap through go-fuse's raw API. FUSE node IDs are
// the bootstrap's inode numbers (the root is 1 in both), so the kernel's
// view maps onto the mapped bootstrap with no in-memory tree: memory does
// not grow with the files looked up, inode numbers are stable across
// mounts, and hardlinks are one node. Everything is read-only; the mount
// carries "ro", so the kernel answers writes with EROFS itself.
type rafsFS struct {
	fuse.RawFileSystem
	b       *rafs.Bootstrap
	chunks  ChunkReader
	log     *slog.Logger
	timeout time.Duration // entry and attr validity: the tree never changes
	image   string
	handles sync.Map // fh -> *handle
	nextFh  uint64
	mu      sync.Mutex

	server   *fuse.Server     // set by Init: what the kernel supports
	openless openlessTrackers // sequential tracking when the kernel does not open

	// pt opens files with a copy in passthrough mode; nil without file
	// copies. noCaps are the capabilities the mount withheld from the
	// kernel (MountOptions.DisabledCapabilities).
	pt     *passthrough
	noCaps uint64

	// failed holds the failed chunk reads of open files (heldKey ->
	// failure) for failHold; nfailed counts its entries, so that reads
	// skip the lookup while there are none.
	failed  sync.Map
	nfailed atomic.Int32
}

// failHold is how long the failed read of a chunk through a file handle
// answers the next read of that chunk through the same handle at once.
// When the readahead of a page fails, the kernel at once retries that
// page with a read of its own; without the hold the retry would wait out
// the backend's whole deadline again, and a read() of a chunk nobody can
// serve would fail after twice the configured deadline. The hold answers
// one read: the kernel's retry (or an application's own, if the kernel
// did not retry); reads after it, and reads through other handles, try
// again in full.
const failHold = 2 * time.Second

type heldKey struct {
	fh    uint64
	chunk uint32
}

// recentFailure returns, and forgets, the failure of the last read of
// chunk idx through handle fh if it failed less than failHold ago.
func (f *rafsFS) recentFailure(fh uint64, idx uint32) error {
	if f.nfailed.Load() == 0 {
		return nil
	}
	v, ok := f.failed.LoadAndDelete(heldKey{fh, idx})
	if !ok {
		return nil
	}
	f.nfailed.Add(-1)
	if fl := v.(failure); time.Since(fl.at) < failHold {
		return fl.err
	}
	return nil
}

type failure struct {
	at  time.Time
	err error
}

// noteFailure records a failed read of chunk idx through handle fh for
// recentFailure.
func (f *rafsFS) noteFailure(fh uint64, idx uint32, err error) {
	if _, loaded := f.failed.Swap(heldKey{fh, idx}, failure{at: time.Now(), err: err}); !loaded {
		f.nfailed.Add(1)
	}
	if f.nfailed.Load() > maxHeldFailures {
		f.failed.Range(func(k, v any) bool {
			if time.Since(v.(failure).at) >= failHold && f.failed.CompareAndDelete(k, v) {
				f.nfailed.Add(-1)
			}
			return true
		})
	}
}

// maxHeldFailures is how many failures are held before expired ones are
// swept.
const maxHeldFailures = 1024

// ChunkReader is what the filesystem reads file contents through.
type ChunkReader interface {
	// ReadChunk fills dst (len == c.Size) with the verified bytes of c.
	ReadChunk(ctx context.Context, c rafs.Chunk, dst []byte) error
	// ReadChunkAt fills p with bytes [off, off+len(p)) of chunk c, which
	// lets the reader serve parts of a chunk from memory without copying
	// the whole chunk.
	ReadChunkAt(ctx context.Context, c rafs.Chunk, off int, p []byte) error
}

// ChunkViewer is a ChunkReader that also lends out the decoded bytes of
// a chunk, so that a read's reply is written to the kernel straight
// from them (one writev of slices) rather than copied into a reply
// buffer first. Read finds it by type assertion.
type ChunkViewer interface {
	// ViewChunk returns the verified decoded bytes of c (c.Size of
	// them), which nobody writes while the caller holds them, and done,
	// which the caller calls once, when it no longer uses them (the reply
	// written): the memory may then be reused. The caller must not
	// modify them.
	ViewChunk(ctx context.Context, c rafs.Chunk) (data []byte, done func(), err error)
}

func newRafsFS(b *rafs.Bootstrap, chunks ChunkReader, image string, timeout time.Duration, log *slog.Logger) *rafsFS {
	return &rafsFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), b: b, chunks: chunks, image: image, timeout: timeout, log: log}
}

func (f *rafsFS) String() string { return "damselfly" }

// errno maps errors to FUSE status codes. Only this adapter does that.
func errno(err error) fuse.Status {
	switch {
	case err == nil:
		return fuse.OK
	case errors.Is(err, fs.ErrNotExist):
		return fuse.ENOENT
	case errors.Is(err, context.Canceled):
		return fuse.EINTR
	case errors.Is(err, rafs.ErrCorrupt):
		return fuse.EIO
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return fuse.Status(en)
	}
	return fuse.EIO
}

func (f *rafsFS) fillAttr(in rafs.Inode, a *fuse.Attr) {
	a.Ino = uint64(in.Ino)
	a.Size = in.Size
	a.Blocks = (in.Size + 511) / 512
	a.Mtime, a.Mtimensec = uint64(in.MtimeSec), in.MtimeNsec
	a.Atime, a.Atimensec = a.Mtime, a.Mtimensec
	a.Ctime, a.Ctimensec = a.Mtime, a.Mtimensec
	a.Mode = in.Mode
	a.Nlink = in.Nlink
	a.Uid, a.Gid = in.UID, in.GID
	a.Rdev = encodeDev(in.RdevMajor, in.RdevMinor)
	a.Blksize = 4096
}

// encodeDev packs a device number the way the kernel's FUSE ABI expects
// (new_encode_dev: 12 bits of major, 20 of minor).
func encodeDev(major, minor uint32) uint32 {
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12
}

func (f *rafsFS) entry(in rafs.Inode, out *fuse.EntryOut) {
	out.NodeId = uint64(in.Ino)
	out.Generation = 1
	out.SetEntryTimeout(f.timeout)
	out.SetAttrTimeout(f.timeout)
	f.fillAttr(in, &out.Attr)
}

func (f *rafsFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	in, err := f.b.Lookup(rafs.Ino(h.NodeId), name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A negative entry, cached as long as a positive one: the
			// kernel keeps one only from a successful reply with node
			// ID 0 (an ENOENT reply leaves it to ask again at every
			// stat, open or exec of the name), and tells the caller
			// ENOENT itself. Dynamic loaders and interpreters probe
			// many names that do not exist, over and over.
			out.NodeId = 0
			out.SetEntryTimeout(f.timeout)
			return fuse.OK
		}
		return errno(err)
	}
	f.entry(in, out)
	return fuse.OK
}

func (f *rafsFS) Forget(nodeid, nlookup uint64) {}

func (f *rafsFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	ino, err := f.b.Inode(rafs.Ino(in.NodeId))
	if err != nil {
		return errno(err)
	}
	out.SetTimeout(f.timeout)
	f.fillAttr(ino, &out.Attr)
	return fuse.OK
}

func (f *rafsFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if in.Mask&2 != 0 { // W_OK
		return fuse.EROFS
	}
	return fuse.OK
}

func (f *rafsFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	in, err := f.b.Inode(rafs.Ino(h.NodeId))
	if err != nil {
		return nil, errno(err)
	}
	t, err := f.b.Readlink(in)
	if err != nil {
		return nil, fuse.EINVAL
	}
	return []byte(t), fuse.OK
}

func (f *rafsFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	in, err := f.b.Inode(rafs.Ino(h.NodeId))
	if err != nil {
		return 0, errno(err)
	}
	xs, err := f.b.Xattrs(in)
	if err != nil {
		return 0, errno(err)
	}
	for _, x := range xs {
		if x.Name == attr {
			if len(dest) == 0 {
				return uint32(len(x.Value)), fuse.OK
			}
			if len(dest) < len(x.Value) {
				return uint32(len(x.Value)), fuse.ERANGE
			}
			return uint32(copy(dest, x.Value)), fuse.OK
		}
	}
	return 0, fuse.ENOATTR
}

func (f *rafsFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	in, err := f.b.Inode(rafs.Ino(h.NodeId))
	if err != nil {
		return 0, errno(err)
	}
	xs, err := f.b.Xattrs(in)
	if err != nil {
		return 0, errno(err)
	}
	n := 0
	for _, x := range xs {
		n += len(x.Name) + 1
	}
	if len(dest) == 0 {
		return uint32(n), fuse.OK
	}
	if len(dest) < n {
		return uint32(n), fuse.ERANGE
	}
	off := 0
	for _, x := range xs {
		off += copy(dest[off:], x.Name)
		dest[off] = 0
		off++
	}
	return uint32(n), fuse.OK
}

func (f *rafsFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize = 4096
	out.Frsize = 4096
	out.NameLen = rafs.MaxNameLen
	out.Files = uint64(f.b.InodeCount())
	var bytes uint64
	blobs, err := f.b.Blobs()
	if err == nil {
		for _, b := range blobs {
			bytes += b.UncompressedSize
		}
	}
	out.Blocks = (bytes + 4095) / 4096
	return fuse.OK
}

// handle is an open regular file: the inode, decoded once, and where
// its reads have got to, which tells sequential reading from random.
type handle struct {
	in  rafs.Inode
	seq seqTracker
	// tracked: opened through pt, in passthrough mode if pass.
	tracked, pass bool
}

// Init keeps the server, whose kernel settings say whether the kernel
// can read files without opening them, and through which backing files
// for passthrough are registered.
func (f *rafsFS) Init(s *fuse.Server) {
	f.server = s
	if f.pt != nil {
		f.pt.enable(s)
	}
}

// passthroughOn reports whether opens go through pt: there are file
// copies, the kernel was offered, and offers, FUSE passthrough, and it
// has not refused a backing file (a daemon without CAP_SYS_ADMIN): then
// the daemon goes back to open-less reads at the next OPEN.
func (f *rafsFS) passthroughOn() bool {
	return f.pt != nil && f.server != nil && f.noCaps&fuse.CAP_PASSTHROUGH == 0 &&
		f.server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH != 0 && !f.pt.off.Load()
}

// kernelOpensLess reports whether the kernel supports open-less reads
// (FUSE_NO_OPEN_SUPPORT): then Open answers ENOSYS once, and the kernel
// sends no OPEN and RELEASE for regular files after it, keeping their
// page cache across opens as FOPEN_KEEP_CACHE would. For a tree of small
// files that is two round trips of the four or five each file costs.
//
// Passthrough needs an OPEN to answer, and one ENOSYS stops every OPEN of
// the mount: with file copies the daemon answers every OPEN.
func (f *rafsFS) kernelOpensLess() bool {
	return !f.passthroughOn() && f.server != nil && f.server.KernelSettings().Flags64()&fuse.CAP_NO_OPEN_SUPPORT != 0
}

func (f *rafsFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.Flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND|syscall.O_CREAT) != 0 {
		return fuse.EROFS
	}
	ino, err := f.b.Inode(rafs.Ino(in.NodeId))
	if err != nil {
		return errno(err)
	}
	if !ino.IsReg() {
		return fuse.EINVAL
	}
	if f.kernelOpensLess() {
		return fuse.ENOSYS
	}
	h := &handle{in: ino}
	if f.passthroughOn() {
		h.tracked = true
		out.BackingID, h.pass = f.pt.open(ino)
	}
	f.mu.Lock()
	f.nextFh++
	fh := f.nextFh
	f.mu.Unlock()
	f.handles.Store(fh, h)
	out.Fh = fh
	if h.pass {
		// The kernel reads the copy: no READ comes here.
		out.OpenFlags = fuse.FOPEN_PASSTHROUGH
		return fuse.OK
	}
	// The content never changes: keep the page cache across opens.
	out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	return fuse.OK
}

// Flush answers ENOSYS: a read-only filesystem has nothing to write back
// when a descriptor closes, and after the first ENOSYS the kernel stops
// sending FLUSH for every close(2), a round trip per file saved.
func (f *rafsFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return fuse.ENOSYS
}

func (f *rafsFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	v, ok := f.handles.LoadAndDelete(in.Fh)
	if h, _ := v.(*handle); ok && h.tracked {
		f.pt.release(h.in, h.pass)
	}
}

func (f *rafsFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	var ino rafs.Inode
	var seq *seqTracker
	hold := in.Fh // whose failed reads answer its retries (noteFailure)
	if v, ok := f.handles.Load(in.Fh); ok {
		h := v.(*handle)
		ino, seq = h.in, &h.seq
	} else if in.Fh == 0 && f.kernelOpensLess() {
		// An open-less read: the inode from the node ID, and the reading
		// thread in place of the handle. The kernel retries a failed
		// page from the thread that read it.
		var err error
		if ino, err = f.b.Inode(rafs.Ino(in.NodeId)); err != nil {
			return nil, errno(err)
		}
		if !ino.IsReg() {
			return nil, fuse.EINVAL
		}
		seq = f.openless.get(ino.Ino, in.Caller.Pid)
		hold = openlessHold | uint64(in.Caller.Pid)
	} else {
		return nil, fuse.EBADF
	}
	if in.Offset >= ino.Size {
		return fuse.ReadResultData(nil), fuse.OK
	}
	size := min(uint64(len(buf)), ino.Size-in.Offset)
	ctx := requestContext(cancel)
	cs := uint64(f.b.ChunkSize())
	if ra, ok := f.chunks.(Readaheader); ok {
		// Start on the chunks after this read before waiting for it,
		// so that their fetch overlaps this one.
		if last, ok := seq.advance(in.Offset, size, cs); ok {
			ra.Readahead(ino, last)
		}
	}
	viewer, _ := f.chunks.(ChunkViewer)
	var views *viewed
	if viewer != nil {
		views = &viewed{}
	}
	done := uint64(0)
	for done < size {
		off := in.Offset + done
		idx := off / cs
		seg, err := f.b.FileSegment(ino, uint32(idx))
		c := seg.Chunk
		if err != nil {
			f.log.Error("read failed: bad chunk table", "image", f.image, "file", f.pathOf(ino), "offset", off, "err", err)
			return nil, fuse.EIO
		}
		within := int(off - idx*cs)
		n := min(size-done, uint64(int(seg.Len)-within))
		if err := f.recentFailure(hold, c.Index); err != nil {
			f.log.Debug("read failed: the chunk's read failed just before", "image", f.image, "file", f.pathOf(ino), "offset", off, "chunk", c.Digest.String(), "err", err)
			return nil, fuse.EIO
		}
		if viewer != nil {
			var data []byte
			var release func()
			if data, release, err = viewer.ViewChunk(ctx, c); err == nil {
				at := int(seg.Off) + within
				views.vecs = append(views.vecs, data[at:at+int(n)])
				views.done = append(views.done, release)
			}
		} else {
			err = f.chunks.ReadChunkAt(ctx, c, int(seg.Off)+within, buf[done:done+n])
		}
		if err != nil {
			views.Done() // no reply: the chunks viewed so far are let go
			if ctx.Err() != nil {
				return nil, fuse.EINTR
			}
			f.log.Error("read failed", "image", f.image, "file", f.pathOf(ino), "offset", off, "chunk", c.Digest.String(), "err", err)
			f.noteFailure(hold, c.Index, err)
			return nil, fuse.EIO
		}
		done += n
	}
	if viewer != nil {
		// Written with writev from the chunks themselves: no copy into
		// buf, and no attempt at splicing, which go-fuse makes (and
		// gives up) for every reply whose data is a plain buffer.
		return views, fuse.OK
	}
	return fuse.ReadResultData(buf[:size]), fuse.OK
}

// pathOf names a file for error messages: up through the parents,
// finding each name in its parent's entries. Only used on errors.
func (f *rafsFS) pathOf(in rafs.Inode) string {
	var parts []string
	cur := in
	for depth := 0; cur.Ino != rafs.RootIno && depth < rafs.MaxPathDepth; depth++ {
		parent, err := f.b.Inode(cur.Parent)
		if err != nil {
			break
		}
		ents, err := f.b.ReadDir(parent.Ino)
		if err != nil {
			break
		}
		name := fmt.Sprintf("<inode %d>", cur.Ino)
		for _, e := range ents {
			if e.Ino == cur.Ino {
				name = e.Name
				break
			}
		}
		parts = append(parts, name)
		cur = parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return "/" + strings.Join(parts, "/")
}

// requestContext turns go-fuse's cancel channel (closed when the kernel
// interrupts the request) into a context, without a goroutine per
// request: its Done is the channel itself. It must not outlive the
// request, since go-fuse reuses the channel; the read path only waits on
// it (fetches run under contexts of their own).
func requestContext(cancel <-chan struct{}) context.Context {
	if cancel == nil {
		return context.Background()
	}
	return interruptCtx{Context: context.Background(), done: cancel}
}

// interruptCtx is a request's context: no deadline, no values, done
// when the kernel interrupts the request.
type interruptCtx struct {
	context.Context
	done <-chan struct{}
}

func (c interruptCtx) Done() <-chan struct{} { return c.done }

func (c interruptCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

func (f *rafsFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ino, err := f.b.Inode(rafs.Ino(in.NodeId))
	if err != nil {
		return errno(err)
	}
	if !ino.IsDir() {
		return fuse.ENOTDIR
	}
	out.OpenFlags = fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_CACHE_DIR
	return fuse.OK
}

func (f *rafsFS) ReleaseDir(in *fuse.ReleaseIn) {}

func (f *rafsFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, false)
}

func (f *rafsFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, true)
}

// readDir lists from stream position in.Offset: 0 is ".", 1 "..", then
// the dirents in order. Positions are stable, so a listing resumed at any
// offset continues where it left off.
func (f *rafsFS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	dir, err := f.b.Inode(rafs.Ino(in.NodeId))
	if err != nil {
		return errno(err)
	}
	if !dir.IsDir() {
		return fuse.ENOTDIR
	}
	ents, err := f.b.ReadDir(dir.Ino)
	if err != nil {
		f.log.Error("readdir failed", "image", f.image, "inode", dir.Ino, "err", err)
		return fuse.EIO
	}
	for pos := in.Offset; pos < uint64(len(ents))+2; pos++ {
		var e fuse.DirEntry
		var child rafs.Inode
		switch pos {
		case 0:
			e = fuse.DirEntry{Name: ".", Ino: uint64(dir.Ino), Mode: rafs.ModeDir}
			child = dir
		case 1:
			parent, err := f.b.Inode(dir.Parent)
			if err != nil {
				return errno(err)
			}
			e = fuse.DirEntry{Name: "..", Ino: uint64(parent.Ino), Mode: rafs.ModeDir}
			child = parent
		default:
			d := ents[pos-2]
			if child, err = f.b.Inode(d.Ino); err != nil {
				return errno(err)
			}
			e = fuse.DirEntry{Name: d.Name, Ino: uint64(d.Ino), Mode: child.Mode}
		}
		e.Off = pos + 1
		if !plus {
			if !out.AddDirEntry(e) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			break
		}
		if pos >= 2 {
			f.entry(child, eo)
		}
	}
	return fuse.OK
}

// viewed is a read's reply written from the decoded chunks it viewed
// (ChunkViewer): go-fuse writes the slices with one writev and then calls
// Done, which lets the chunks go. It is go-fuse's scatter-gather result
// (fuse.ReadResultVector) with that release added.
type viewed struct {
	vecs [][]byte
	done []func()
}

var _ fuse.ReadResult = (*viewed)(nil)

func (v *viewed) Size() int {
	n := 0
	for _, b := range v.vecs {
		n += len(b)
	}
	return n
}

// Bytes concatenates the slices into buf, for a write path that cannot
// take them apart.
func (v *viewed) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, b := range v.vecs {
		buf = append(buf, b...)
	}
	return buf, fuse.OK
}

// Slices hands go-fuse the slices to write with writev (its withSlice).
func (v *viewed) Slices() ([][]byte, fuse.Status) { return v.vecs, fuse.OK }

// Done lets the viewed chunks go; once, after the reply is written (or
// when there is none). A nil *viewed does nothing.
func (v *viewed) Done() {
	if v == nil {
		return
	}
	for _, d := range v.done {
		d()
	}
	v.vecs, v.done = nil, nil
}
