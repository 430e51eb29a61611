package erofs

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"

	"damselfly/rafs"
)

// Image is the EROFS layout of one RAFS bootstrap: its metadata, built in
// memory, and where each regular file's bytes go. The bytes of files are
// not part of it; ReadAt and WriteTo take them from a rafs.ChunkSource.
// An Image is immutable and safe for concurrent use.
type Image struct {
	b        *rafs.Bootstrap
	meta     []byte   // blocks [0, len(meta)/BlockSize): superblock, inodes, directory and symlink blocks
	extents  []Extent // regular files with data, by Block
	size     int64
	inodes   int
	metaUsed int64 // bytes of meta that hold records, before block padding
}

// Extent places one regular file's bytes: Size bytes from block Block,
// zero-padded to the block after them.
type Extent struct {
	Block uint32
	Size  uint64
	Inode rafs.Inode
}

// Size is the image's length in bytes, a multiple of BlockSize.
func (im *Image) Size() int64 { return im.size }

// MetadataSize is the length of the leading part of the image that
// Build generated (everything but file data), a multiple of BlockSize.
func (im *Image) MetadataSize() int64 { return int64(len(im.meta)) }

// Extents lists the regular files with data, in image order. The caller
// must not modify it.
func (im *Image) Extents() []Extent { return im.extents }

// Inodes is the number of inodes in the image.
func (im *Image) Inodes() int { return im.inodes }

// node is one inode on its way into the image.
type node struct {
	in      rafs.Inode
	parent  rafs.Ino
	xattrs  []byte
	names   []dirEntry // directories: every entry, "." and ".." included, sorted
	target  []byte     // symlinks
	content int        // directory or symlink bytes
	inline  bool       // the last block of content follows the inode
	off     int64      // byte offset of the inode; nid = off / 32
	block   uint32     // first block of non-inline content or file data
}

type dirEntry struct {
	name string
	ino  rafs.Ino
	ft   uint8
}

// Build lays out the EROFS image of b. It reads only b (no file data), so
// it is cheap: about 100 bytes of metadata per inode and a block per
// directory of more than a few dozen entries. It fails with ErrUnsupported
// for a tree EROFS cannot hold as this package writes it, and with an
// error wrapping rafs.ErrCorrupt for a bootstrap that is not a tree.
func Build(b *rafs.Bootstrap) (*Image, error) {
	nodes, order, err := collect(b)
	if err != nil {
		return nil, err
	}
	// Inodes first: each 32-byte aligned; an inode with an inline tail
	// keeps it in the inode's block, as EROFS requires.
	off := int64(superOffset + superSize)
	for _, ino := range order {
		n := nodes[ino]
		off = alignUp(off, inodeAlign)
		head := int64(inodeSize + len(n.xattrs))
		tail := int64(0)
		if n.content > 0 {
			tail = int64(n.content - (blocksFor(n.content)-1)*BlockSize)
			n.inline = head+tail <= BlockSize
			if !n.inline {
				tail = 0
			}
		}
		if head+tail <= BlockSize && off%BlockSize+head+tail > BlockSize {
			off = alignUp(off, BlockSize)
		}
		n.off = off
		off += head + tail
	}
	metaUsed := off
	// Then the blocks of directories and symlinks that are not inline.
	block := uint32(alignUp(off, BlockSize) / BlockSize)
	for _, ino := range order {
		n := nodes[ino]
		if n.content == 0 {
			continue
		}
		full := blocksFor(n.content)
		if n.inline {
			full--
		}
		if full > 0 {
			n.block = block
			block += uint32(full)
		}
	}
	metaBlocks := block
	// Then file data, in the order of the files' first chunks in their
	// blobs: a stretch of the image read in order is a stretch of a blob
	// read in order, and small files batched into one chunk sit
	// together, as the chunk does.
	type placed struct {
		n      *node
		blob   uint32
		stored uint64
		within uint32
	}
	var files []placed
	for _, ino := range order {
		n := nodes[ino]
		if !n.in.IsReg() || n.in.Size == 0 {
			continue
		}
		seg, err := b.FileSegment(n.in, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, placed{n, seg.Blob, seg.CompressedOffset, seg.Off})
	}
	sort.SliceStable(files, func(i, j int) bool {
		a, c := files[i], files[j]
		if a.blob != c.blob {
			return a.blob < c.blob
		}
		if a.stored != c.stored {
			return a.stored < c.stored
		}
		return a.within < c.within
	})
	var extents []Extent
	for _, f := range files {
		n := f.n
		nb := uint64(blocksFor64(n.in.Size))
		if uint64(block)+nb > 1<<32-1 {
			return nil, fmt.Errorf("%w: image larger than 16 TiB", ErrUnsupported)
		}
		n.block = block
		extents = append(extents, Extent{Block: block, Size: n.in.Size, Inode: n.in})
		block += uint32(nb)
	}

	im := &Image{
		b:        b,
		meta:     make([]byte, int64(metaBlocks)*BlockSize),
		extents:  extents,
		size:     int64(block) * BlockSize,
		inodes:   len(order),
		metaUsed: metaUsed,
	}
	sum := sha256.Sum256(b.Bytes())
	s := superblock{rootNid: uint16(nodes[rafs.RootIno].off / inodeAlign), inodes: uint64(len(order)), blocks: block}
	copy(s.uuid[:], sum[:16])
	putSuper(im.meta[superOffset:], s)
	for _, ino := range order {
		im.writeNode(nodes, nodes[ino])
	}
	return im, nil
}

// collect walks b from the root, breadth first, and returns every inode
// reachable once (hardlinks share one) and the walk's order.
func collect(b *rafs.Bootstrap) (map[rafs.Ino]*node, []rafs.Ino, error) {
	root, err := b.Inode(rafs.RootIno)
	if err != nil {
		return nil, nil, err
	}
	nodes := map[rafs.Ino]*node{}
	order := []rafs.Ino{}
	add := func(in rafs.Inode, parent rafs.Ino) (*node, error) {
		n := &node{in: in, parent: parent}
		xs, err := b.Xattrs(in)
		if err != nil {
			return nil, err
		}
		if n.xattrs, err = encodeXattrs(xs); err != nil {
			return nil, fmt.Errorf("inode %d: %w", in.Ino, err)
		}
		if in.Mode&^uint32(rafs.ModeType|rafs.ModePerm) != 0 || in.Mode > 0xffff {
			return nil, fmt.Errorf("inode %d: mode %#o: %w", in.Ino, in.Mode, rafs.ErrCorrupt)
		}
		if in.IsSymlink() {
			t, err := b.Readlink(in)
			if err != nil {
				return nil, err
			}
			n.target = []byte(t)
			n.content = len(t)
		}
		nodes[in.Ino] = n
		order = append(order, in.Ino)
		return n, nil
	}
	if _, err := add(root, rafs.RootIno); err != nil {
		return nil, nil, err
	}
	for i := 0; i < len(order); i++ {
		dir := nodes[order[i]]
		if !dir.in.IsDir() {
			continue
		}
		ents, err := b.ReadDir(dir.in.Ino)
		if err != nil {
			return nil, nil, err
		}
		names := make([]dirEntry, 0, len(ents)+2)
		names = append(names, dirEntry{".", dir.in.Ino, ftDir}, dirEntry{"..", dir.parent, ftDir})
		for _, e := range ents {
			child, seen := nodes[e.Ino]
			if !seen {
				in, err := b.Inode(e.Ino)
				if err != nil {
					return nil, nil, err
				}
				if child, err = add(in, dir.in.Ino); err != nil {
					return nil, nil, err
				}
			} else if child.in.IsDir() {
				return nil, nil, fmt.Errorf("directory %d named twice: %w", e.Ino, rafs.ErrCorrupt)
			}
			names = append(names, dirEntry{e.Name, e.Ino, fileType(child.in.Mode)})
		}
		sort.Slice(names, func(i, j int) bool { return names[i].name < names[j].name })
		dir.names = names
		dir.content = dirContentSize(names)
	}
	return nodes, order, nil
}

// dirBlocks splits sorted entries into directory blocks: each block holds
// its dirents, then their names, within BlockSize.
func dirBlocks(names []dirEntry) [][]dirEntry {
	var out [][]dirEntry
	start, used := 0, 0
	for i, e := range names {
		need := direntSize + len(e.name)
		if used+need > BlockSize {
			out = append(out, names[start:i])
			start, used = i, 0
		}
		used += need
	}
	return append(out, names[start:])
}

// dirContentSize is a directory's i_size: full blocks, then the bytes the
// last block uses.
func dirContentSize(names []dirEntry) int {
	blocks := dirBlocks(names)
	last := 0
	for _, e := range blocks[len(blocks)-1] {
		last += direntSize + len(e.name)
	}
	return (len(blocks)-1)*BlockSize + last
}

// encodeDir writes a directory's content (dirContentSize bytes).
func encodeDir(dst []byte, names []dirEntry, nids map[rafs.Ino]uint64) {
	for bi, blk := range dirBlocks(names) {
		base := bi * BlockSize
		nameOff := len(blk) * direntSize
		for i, e := range blk {
			d := dst[base+i*direntSize:]
			binary.LittleEndian.PutUint64(d[0:], nids[e.ino])
			binary.LittleEndian.PutUint16(d[8:], uint16(nameOff))
			d[10] = e.ft
			d[11] = 0
			nameOff += copy(dst[base+nameOff:], e.name)
		}
	}
}

// writeNode encodes n's inode, xattrs, inline tail and other blocks into
// the metadata.
func (im *Image) writeNode(nodes map[rafs.Ino]*node, n *node) {
	r := inodeRecord{
		layout:  layoutFlatPlain,
		xattrs:  len(n.xattrs),
		mode:    n.in.Mode,
		ino:     uint32(n.in.Ino),
		uid:     n.in.UID,
		gid:     n.in.GID,
		mtime:   n.in.MtimeSec,
		mtimeNs: n.in.MtimeNsec,
		nlink:   n.in.Nlink,
	}
	var content []byte
	switch {
	case n.in.IsReg():
		r.size = n.in.Size
		r.u = n.block
	case n.in.IsDir():
		nids := make(map[rafs.Ino]uint64, len(n.names))
		for _, e := range n.names {
			nids[e.ino] = uint64(nodes[e.ino].off / inodeAlign)
		}
		content = make([]byte, n.content)
		encodeDir(content, n.names, nids)
	case n.in.IsSymlink():
		content = n.target
	case n.in.Mode&rafs.ModeType == rafs.ModeChr, n.in.Mode&rafs.ModeType == rafs.ModeBlk:
		r.u = encodeDev(n.in.RdevMajor, n.in.RdevMinor)
	}
	if content != nil {
		r.size = uint64(len(content))
		r.u = n.block
		full := (blocksFor(len(content)) - 1) * BlockSize
		if n.inline {
			r.layout = layoutFlatInline
			copy(im.meta[n.off+inodeSize+int64(len(n.xattrs)):], content[full:])
			content = content[:full]
		}
		copy(im.meta[int64(n.block)*BlockSize:], content)
	}
	putInode(im.meta[n.off:], r)
	copy(im.meta[n.off+inodeSize:], n.xattrs)
}

func blocksFor(n int) int         { return (n + BlockSize - 1) / BlockSize }
func blocksFor64(n uint64) uint64 { return (n + BlockSize - 1) / BlockSize }
func alignUp(n, a int64) int64    { return (n + a - 1) / a * a }
