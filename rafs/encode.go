package rafs

import (
	"fmt"
)

// encodeInput is everything a bootstrap holds besides the tree.
type encodeInput struct {
	chunkSize  uint32
	compressor Compressor
	digest     DigestAlgo
	chunks     []Chunk
	blobs      []Blob
	pieceChunk []uint32 // piece sequence number -> chunk index
	prefetch   []*node
}

// heap is the string section, with identical strings stored once.
type heap struct {
	buf  []byte
	seen map[string]uint32
}

func (h *heap) add(s string) (uint32, error) {
	if off, ok := h.seen[s]; ok {
		return off, nil
	}
	if uint64(len(h.buf))+uint64(len(s)) > 1<<32-1 {
		return 0, fmt.Errorf("string heap exceeds 4 GiB")
	}
	off := uint32(len(h.buf))
	h.buf = append(h.buf, s...)
	h.seen[s] = off
	return off, nil
}

// encode lays the tree out as a bootstrap. Inodes are numbered breadth
// first from the root, so every directory's subdirectories have larger
// numbers than it has (the decoder relies on that to refuse cycles), and
// siblings are adjacent.
func (t *tree) encode(in encodeInput) ([]byte, error) {
	// Number inodes breadth first; count names per inode.
	var order []*node // first name of each inode, in inode order
	queue := []*node{t.root}
	t.root.in.ino, t.root.in.nlink = RootIno, 2
	order = append(order, t.root)
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, c := range d.sortedChildren() {
			if c.in.ino != 0 && c.in.mode&ModeType != ModeDir {
				c.in.nlink++
				continue
			}
			if len(order) >= MaxInodes {
				return nil, fmt.Errorf("more than %d inodes", MaxInodes)
			}
			c.in.ino = Ino(len(order) + 1)
			c.in.nlink = 1
			if c.in.mode&ModeType == ModeDir {
				c.in.nlink = 2
				d.in.nlink++
				queue = append(queue, c)
			}
			order = append(order, c)
		}
	}
	// Clear numbering on the way out so encode can run again.
	defer func() {
		for _, n := range order {
			n.in.ino = 0
		}
	}()

	h := &heap{seen: map[string]uint32{}}
	inodes := make([]byte, 0, len(order)*inodeSize)
	var dirents, refs, xattrs []byte
	var nDirents, nRefs, nXattrs uint64
	for _, n := range order {
		i := n.in
		var dataIdx, dataCnt uint32
		switch i.mode & ModeType {
		case ModeDir:
			kids := n.sortedChildren()
			dataIdx, dataCnt = uint32(nDirents), uint32(len(kids))
			for _, c := range kids {
				off, err := h.add(c.name)
				if err != nil {
					return nil, err
				}
				dirents = le.AppendUint32(dirents, off)
				dirents = le.AppendUint32(dirents, uint32(len(c.name)))
				dirents = le.AppendUint32(dirents, uint32(c.in.ino))
				dirents = le.AppendUint32(dirents, 0)
			}
			nDirents += uint64(len(kids))
		case ModeReg:
			want := (i.size + uint64(in.chunkSize) - 1) / uint64(in.chunkSize)
			if uint64(len(i.pieces)) != want {
				return nil, fmt.Errorf("%s: %d chunks for %d bytes", n.pathOf(), len(i.pieces), i.size)
			}
			dataIdx, dataCnt = uint32(nRefs), uint32(len(i.pieces))
			for _, p := range i.pieces {
				refs = le.AppendUint32(refs, in.pieceChunk[p])
				refs = le.AppendUint32(refs, i.batchOff)
			}
			nRefs += uint64(len(i.pieces))
		case ModeLink:
			off, err := h.add(i.target)
			if err != nil {
				return nil, err
			}
			dataIdx, dataCnt = off, uint32(len(i.target))
		}
		xIdx := uint32(nXattrs)
		for _, x := range i.xattrs {
			no, err := h.add(x.Name)
			if err != nil {
				return nil, err
			}
			vo, err := h.add(string(x.Value))
			if err != nil {
				return nil, err
			}
			xattrs = le.AppendUint32(xattrs, no)
			xattrs = le.AppendUint32(xattrs, uint32(len(x.Name)))
			xattrs = le.AppendUint32(xattrs, vo)
			xattrs = le.AppendUint32(xattrs, uint32(len(x.Value)))
		}
		nXattrs += uint64(len(i.xattrs))
		parent := RootIno
		if n.parent != nil {
			parent = n.parent.in.ino
		}
		inodes = le.AppendUint32(inodes, i.mode)
		inodes = le.AppendUint32(inodes, i.uid)
		inodes = le.AppendUint32(inodes, i.gid)
		inodes = le.AppendUint32(inodes, i.nlink)
		inodes = le.AppendUint64(inodes, i.size)
		inodes = le.AppendUint64(inodes, uint64(i.mtimeSec))
		inodes = le.AppendUint32(inodes, i.mtimeNsec)
		inodes = le.AppendUint32(inodes, i.major)
		inodes = le.AppendUint32(inodes, i.minor)
		inodes = le.AppendUint32(inodes, uint32(parent))
		inodes = le.AppendUint32(inodes, dataIdx)
		inodes = le.AppendUint32(inodes, dataCnt)
		inodes = le.AppendUint32(inodes, xIdx)
		inodes = le.AppendUint32(inodes, uint32(len(i.xattrs)))
	}

	chunks := make([]byte, 0, len(in.chunks)*chunkSize)
	for _, c := range in.chunks {
		chunks = append(chunks, c.Digest[:]...)
		chunks = le.AppendUint32(chunks, c.Blob)
		chunks = le.AppendUint32(chunks, c.Flags)
		chunks = le.AppendUint64(chunks, c.CompressedOffset)
		chunks = le.AppendUint32(chunks, c.CompressedSize)
		chunks = le.AppendUint32(chunks, c.Size)
		chunks = le.AppendUint32(chunks, c.Ordinal)
		chunks = le.AppendUint32(chunks, 0)
	}
	blobs := make([]byte, 0, len(in.blobs)*blobSize)
	for _, b := range in.blobs {
		blobs = append(blobs, b.Digest[:]...)
		blobs = le.AppendUint64(blobs, b.CompressedSize)
		blobs = le.AppendUint64(blobs, b.UncompressedSize)
		blobs = le.AppendUint32(blobs, b.ChunkCount)
		blobs = append(blobs, make([]byte, 12)...)
	}
	var prefetch []byte
	for _, n := range in.prefetch {
		prefetch = le.AppendUint32(prefetch, uint32(n.in.ino))
	}

	secs := [numSections][]byte{inodes, dirents, refs, chunks, blobs, xattrs, prefetch, h.buf}
	out := make([]byte, superblockSize, superblockSize+len(inodes)+len(dirents)+len(refs)+len(chunks)+len(blobs)+len(xattrs)+len(prefetch)+len(h.buf)+8*numSections)
	copy(out, Magic)
	le.PutUint32(out[8:], Version)
	le.PutUint32(out[16:], in.chunkSize)
	out[20] = byte(in.compressor)
	out[21] = byte(in.digest)
	le.PutUint32(out[24:], uint32(len(order)))
	le.PutUint32(out[28:], uint32(RootIno))
	for i, s := range secs {
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		le.PutUint64(out[72+16*i:], uint64(len(out)))
		le.PutUint64(out[80+16*i:], uint64(len(s)))
		out = append(out, s...)
	}
	if len(out) > MaxBootstrapSize {
		return nil, fmt.Errorf("bootstrap of %d bytes exceeds the limit", len(out))
	}
	le.PutUint64(out[32:], uint64(len(out)))
	sum := checksum(out)
	copy(out[40:72], sum[:])
	return out, nil
}
