package rafs

import "sort"

// Validate checks the whole bootstrap: every record decodes, the tree is
// a tree (each directory reached once, from its recorded parent), every
// inode is reachable, link counts match, names are sorted and valid, and
// every file's chunks exist with the right sizes. Open checks only what
// lookups need; Validate is for check, fuzzing and untrusted input that
// will be walked in full.
func (b *Bootstrap) Validate() error {
	names := make([]uint32, b.inodes+1) // names seen per inode
	subdirs := make([]uint32, b.inodes+1)
	err := walkEntries(b, func(e entry) error {
		names[e.in.Ino]++
		if e.in.IsDir() && names[e.in.Ino] > 1 {
			return corruptf("directory inode %d reached twice", e.in.Ino)
		}
		if e.in.IsDir() && e.in.Ino != RootIno {
			subdirs[e.in.Parent]++
		}
		if _, err := b.Xattrs(e.in); err != nil {
			return err
		}
		if e.in.IsReg() {
			for i := range e.in.DataCount {
				if _, err := b.FileChunk(e.in, i); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for ino := Ino(1); uint32(ino) <= b.inodes; ino++ {
		in, err := b.Inode(ino)
		if err != nil {
			return err
		}
		if names[ino] == 0 {
			return corruptf("inode %d is not reachable from the root", ino)
		}
		want := names[ino]
		if in.IsDir() {
			want = 2 + subdirs[ino]
		}
		if in.Nlink != want {
			return corruptf("inode %d: nlink %d, want %d", ino, in.Nlink, want)
		}
		xs, _ := b.Xattrs(in)
		for i := 1; i < len(xs); i++ {
			if xs[i-1].Name >= xs[i].Name {
				return corruptf("inode %d: xattrs not sorted", ino)
			}
		}
	}
	// Ordinals count a blob's chunks in offset order: sorted by offset,
	// one blob's ordinals must strictly increase.
	type pos struct {
		off     uint64
		ordinal uint32
	}
	byBlob := map[uint32][]pos{}
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			return err
		}
		byBlob[c.Blob] = append(byBlob[c.Blob], pos{c.CompressedOffset, c.Ordinal})
	}
	for blob, ps := range byBlob {
		sort.Slice(ps, func(i, j int) bool { return ps[i].off < ps[j].off })
		for i := 1; i < len(ps); i++ {
			if ps[i].ordinal <= ps[i-1].ordinal {
				return corruptf("blob %d: chunk at offset %d has ordinal %d, not above %d of the chunk before it",
					blob, ps[i].off, ps[i].ordinal, ps[i-1].ordinal)
			}
		}
	}
	if _, err := b.Blobs(); err != nil {
		return err
	}
	_, err = b.Prefetch()
	return err
}
