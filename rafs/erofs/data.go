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

// Piece is one stretch of a range of the image, Len bytes of one kind:
// metadata (Meta, which aliases the Image and must not be modified),
// zeros (padding after a file's last byte), or a regular file's bytes
// from FileOff (File set). A file piece never crosses a chunk boundary
// of its file.
type Piece struct {
	Len     int
	Meta    []byte
	File    *Extent
	FileOff uint64
}

// Pieces calls fn for each piece of the n bytes at off, in order, and
// stops at fn's first error, which it returns. The range must lie within
// the image.
func (im *Image) Pieces(off int64, n int, fn func(Piece) error) error {
	if off < 0 || n < 0 || off+int64(n) > im.size {
		return fmt.Errorf("erofs: range %d+%d outside the image's %d bytes", off, n, im.size)
	}
	cs := uint64(im.b.ChunkSize())
	for n > 0 {
		var pc Piece
		if off < int64(len(im.meta)) {
			pc.Meta = im.meta[off:min(int64(len(im.meta)), off+int64(n))]
			pc.Len = len(pc.Meta)
		} else {
			blk := uint32(off / BlockSize)
			i := sort.Search(len(im.extents), func(i int) bool { return im.extents[i].Block > blk }) - 1
			e := &im.extents[i] // the metadata ends where the first extent starts
			fo := uint64(off - int64(e.Block)*BlockSize)
			if fo >= e.Size {
				end := alignUp(int64(e.Block)*BlockSize+int64(e.Size), BlockSize)
				pc.Len = int(min(int64(n), end-off))
			} else {
				chunkEnd := min((fo/cs+1)*cs, e.Size)
				pc.File, pc.FileOff, pc.Len = e, fo, int(min(uint64(n), chunkEnd-fo))
			}
		}
		if err := fn(pc); err != nil {
			return err
		}
		off += int64(pc.Len)
		n -= pc.Len
	}
	return nil
}

// ReadAt fills p with the image's bytes at off, reading file bytes from
// src. It returns io.EOF when p reaches past the end of the image.
func (im *Image) ReadAt(ctx context.Context, p []byte, off int64, src rafs.ChunkSource) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("erofs: read at negative offset %d", off)
	}
	if off >= im.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), im.size-off))
	fr := fileReader{b: im.b, src: src}
	n := 0
	err := im.Pieces(off, want, func(pc Piece) error {
		dst := p[n : n+pc.Len]
		switch {
		case pc.Meta != nil:
			copy(dst, pc.Meta)
		case pc.File == nil:
			clear(dst)
		default:
			if rs, ok := src.(ChunkRangeSource); ok {
				if err := fr.readRange(ctx, rs, pc.File.Inode, pc.FileOff, dst); err != nil {
					return err
				}
				break
			}
			v, err := fr.view(ctx, pc.File.Inode, pc.FileOff)
			if err != nil {
				return err
			}
			copy(dst, v)
		}
		n += pc.Len
		return nil
	})
	if err != nil {
		return n, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ChunkRangeSource is a rafs.ChunkSource that can also read part of a
// chunk (the mount daemon's fetcher, which keeps decoded chunks): ReadAt
// then copies only the bytes asked for, once.
type ChunkRangeSource interface {
	// ReadChunkAt fills p with c's uncompressed bytes from off, verified;
	// off+len(p) must not exceed c.Size. Safe for concurrent use.
	ReadChunkAt(ctx context.Context, c rafs.Chunk, off int, p []byte) error
}

// readRange reads len(p) bytes of the file from off, within one chunk of
// the file, into p.
func (fr *fileReader) readRange(ctx context.Context, rs ChunkRangeSource, in rafs.Inode, off uint64, p []byte) error {
	cs := uint64(fr.b.ChunkSize())
	k := off / cs
	seg, err := fr.b.FileSegment(in, uint32(k))
	if err != nil {
		return fmt.Errorf("inode %d segment %d: %w", in.Ino, k, err)
	}
	if err := rs.ReadChunkAt(ctx, seg.Chunk, int(uint64(seg.Off)+off-k*cs), p); err != nil {
		return fmt.Errorf("inode %d chunk %d: %w", in.Ino, seg.Index, err)
	}
	return nil
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
