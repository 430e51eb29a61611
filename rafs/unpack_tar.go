package rafs

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"time"
)

// UnpackTar writes the image's merged root filesystem to w as one PAX tar
// stream: parents before children in name order, extra names of an inode
// as hardlinks to its first name, xattrs as SCHILY.xattr records, and
// mtimes with nanoseconds.
func UnpackTar(ctx context.Context, b *Bootstrap, src ChunkSource, w io.Writer, opts UnpackOptions) error {
	tw := tar.NewWriter(w)
	first := map[Ino]string{}
	buf := make([]byte, 0, b.ChunkSize())
	err := walkEntries(b, func(e entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.rel
		if name == "" {
			name = "."
		}
		h := &tar.Header{
			Name:    name,
			Mode:    int64(e.in.Mode & ModePerm),
			Uid:     int(e.in.UID),
			Gid:     int(e.in.GID),
			ModTime: time.Unix(e.in.MtimeSec, int64(e.in.MtimeNsec)),
			Format:  tar.FormatPAX,
		}
		if f, ok := first[e.in.Ino]; ok && !e.in.IsDir() {
			h.Typeflag, h.Linkname = tar.TypeLink, f
			return tw.WriteHeader(h)
		}
		first[e.in.Ino] = name
		xs, err := b.Xattrs(e.in)
		if err != nil {
			return err
		}
		for _, x := range xs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[paxXattr+x.Name] = string(x.Value)
		}
		switch e.in.Mode & ModeType {
		case ModeDir:
			h.Typeflag = tar.TypeDir
			if e.rel != "" {
				h.Name += "/"
			}
		case ModeReg:
			h.Typeflag, h.Size = tar.TypeReg, int64(e.in.Size)
		case ModeLink:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = b.Readlink(e.in); err != nil {
				return err
			}
		case ModeChr, ModeBlk:
			h.Typeflag = tar.TypeChar
			if e.in.Mode&ModeType == ModeBlk {
				h.Typeflag = tar.TypeBlock
			}
			h.Devmajor, h.Devminor = int64(e.in.RdevMajor), int64(e.in.RdevMinor)
		case ModeFifo:
			h.Typeflag = tar.TypeFifo
		case ModeSock:
			opts.logger().Warn("tar cannot hold a socket; skipped", "path", e.rel)
			return nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", e.rel, err)
		}
		for i := range e.in.DataCount {
			if !e.in.IsReg() {
				break
			}
			seg, err := b.FileSegment(e.in, i)
			if err != nil {
				return fmt.Errorf("%s: %w", e.rel, err)
			}
			buf = buf[:seg.Size]
			if err := src.ReadChunk(ctx, seg.Chunk, buf); err != nil {
				return fmt.Errorf("%s: chunk %d: %w", e.rel, i, err)
			}
			if _, err := tw.Write(buf[seg.Off : seg.Off+seg.Len]); err != nil {
				return fmt.Errorf("%s: %w", e.rel, err)
			}
			if opts.Progress != nil {
				opts.Progress(int64(seg.Len))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
