package erofs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"

	"damselfly/rafs"
)

// WriteTo writes the whole image to w: the metadata, then every file's
// bytes read from src (which verifies each chunk), each zero-padded to
// its last block. A chunk shared by consecutive files (batched small
// files) is read once.
func (im *Image) WriteTo(ctx context.Context, w io.Writer, src rafs.ChunkSource) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	n, err := bw.Write(im.meta)
	written := int64(n)
	if err != nil {
		return written, err
	}
	fr := fileReader{b: im.b, src: src}
	var zeros [BlockSize]byte
	for _, e := range im.extents {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		for off := uint64(0); off < e.Size; {
			p, err := fr.view(ctx, e.Inode, off)
			if err != nil {
				return written, err
			}
			n, err := bw.Write(p)
			written += int64(n)
			if err != nil {
				return written, err
			}
			off += uint64(len(p))
		}
		if pad := int(alignUp(int64(e.Size), BlockSize) - int64(e.Size)); pad > 0 {
			n, err := bw.Write(zeros[:pad])
			written += int64(n)
			if err != nil {
				return written, err
			}
		}
	}
	return written, bw.Flush()
}

// ReadAt fills p with the image's bytes at off, reading file bytes from
// src. It returns io.EOF when p reaches past the end of the image.
func (im *Image) ReadAt(ctx context.Context, p []byte, off int64, src rafs.ChunkSource) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("erofs: read at negative offset %d", off)
	}
	fr := fileReader{b: im.b, src: src}
	n := 0
	for n < len(p) && off < im.size {
		k, err := im.readPart(ctx, &fr, p[n:], off)
		n += k
		off += int64(k)
		if err != nil {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readPart fills a prefix of p at off (< im.size) from one region: the
// metadata, or one extent's file bytes, or its padding.
func (im *Image) readPart(ctx context.Context, fr *fileReader, p []byte, off int64) (int, error) {
	if off < int64(len(im.meta)) {
		return copy(p, im.meta[off:]), nil
	}
	blk := uint32(off / BlockSize)
	i := sort.Search(len(im.extents), func(i int) bool { return im.extents[i].Block > blk }) - 1
	e := im.extents[i] // the metadata ends where the first extent starts
	fo := uint64(off - int64(e.Block)*BlockSize)
	if fo >= e.Size {
		end := alignUp(int64(e.Block)*BlockSize+int64(e.Size), BlockSize)
		k := min(int64(len(p)), end-off)
		clear(p[:k])
		return int(k), nil
	}
	v, err := fr.view(ctx, e.Inode, fo)
	if err != nil {
		return 0, err
	}
	return copy(p, v), nil
}

// fileReader reads files chunk by chunk, keeping the last chunk it read.
type fileReader struct {
	b     *rafs.Bootstrap
	src   rafs.ChunkSource
	chunk uint32 // table index of the chunk in buf
	have  bool
	buf   []byte
}

// view returns the file's bytes from off to the end of the chunk that
// holds off. The slice is valid until the next call.
func (fr *fileReader) view(ctx context.Context, in rafs.Inode, off uint64) ([]byte, error) {
	cs := uint64(fr.b.ChunkSize())
	k := off / cs
	seg, err := fr.b.FileSegment(in, uint32(k))
	if err != nil {
		return nil, fmt.Errorf("inode %d segment %d: %w", in.Ino, k, err)
	}
	if !fr.have || fr.chunk != seg.Index {
		if cap(fr.buf) < int(seg.Size) {
			fr.buf = make([]byte, seg.Size)
		}
		fr.buf = fr.buf[:seg.Size]
		fr.have = false
		if err := fr.src.ReadChunk(ctx, seg.Chunk, fr.buf); err != nil {
			return nil, fmt.Errorf("inode %d chunk %d: %w", in.Ino, seg.Index, err)
		}
		fr.chunk, fr.have = seg.Index, true
	}
	in0 := off - k*cs
	return fr.buf[uint64(seg.Off)+in0 : uint64(seg.Off)+uint64(seg.Len)], nil
}
