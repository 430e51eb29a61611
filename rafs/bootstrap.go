package rafs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

var le = binary.LittleEndian

type section struct{ off, size uint64 }

// Bootstrap is a decoded bootstrap. Opening checks the superblock, the
// checksum and the section table; records are decoded and bounds-checked
// one at a time when asked for, so lookups never decode the whole tree.
// A Bootstrap is immutable and safe for concurrent use.
type Bootstrap struct {
	data       []byte
	unmap      func() error
	chunkSize  uint32
	compressor Compressor
	digest     DigestAlgo
	inodes     uint32
	sec        [numSections]section
}

// OpenOptions tune Open and Decode.
type OpenOptions struct {
	// SkipChecksum skips hashing the whole file, for callers that have just
	// verified the same bytes against a digest (the manifest's layer digest).
	SkipChecksum bool
}

// Open maps the bootstrap file at path read-only and decodes it.
func Open(path string, opts OpenOptions) (*Bootstrap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open bootstrap: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open bootstrap: %w", err)
	}
	if st.Size() < superblockSize {
		return nil, corruptf("%s: %d bytes is shorter than the %d-byte superblock", path, st.Size(), superblockSize)
	}
	if st.Size() > MaxBootstrapSize {
		return nil, corruptf("%s: %d bytes exceeds the %d-byte limit", path, st.Size(), int64(MaxBootstrapSize))
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap bootstrap %s: %w", path, err)
	}
	b, err := Decode(data, opts)
	if err != nil {
		unix.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b.unmap = func() error { return unix.Munmap(data) }
	return b, nil
}

// Decode decodes a bootstrap held in data. The Bootstrap refers to data,
// which must not change while it is in use.
func Decode(data []byte, opts OpenOptions) (*Bootstrap, error) {
	if len(data) < superblockSize {
		return nil, corruptf("%d bytes is shorter than the %d-byte superblock", len(data), superblockSize)
	}
	if uint64(len(data)) > MaxBootstrapSize {
		return nil, corruptf("%d bytes exceeds the size limit", len(data))
	}
	sb := data[:superblockSize]
	b, size, err := parseHeader(sb)
	if err != nil {
		return nil, err
	}
	if size != uint64(len(data)) {
		return nil, corruptf("superblock says %d bytes, file has %d (truncated or padded)", size, len(data))
	}
	if !opts.SkipChecksum {
		if got := checksum(data); !bytes.Equal(got[:], sb[40:72]) {
			return nil, corruptf("checksum mismatch: stored %x, computed %x", sb[40:72], got[:])
		}
	}
	if err := b.parseSections(sb, size); err != nil {
		return nil, err
	}
	b.data = data
	root, err := b.Inode(RootIno)
	if err != nil {
		return nil, err
	}
	if !root.IsDir() {
		return nil, corruptf("root inode is not a directory")
	}
	return b, nil
}

// parseHeader checks the fields of superblock sb that stand on their own
// and returns them with the file length the superblock declares. It
// needs nothing but the superblock, so a stream reader can refuse a bad
// or oversized bootstrap before reading further.
func parseHeader(sb []byte) (*Bootstrap, uint64, error) {
	if string(sb[0:8]) != Magic {
		return nil, 0, corruptf("bad magic %q", sb[0:8])
	}
	if v := le.Uint32(sb[8:]); v != Version {
		return nil, 0, corruptf("unsupported version %d (this build reads %d)", v, Version)
	}
	if f := le.Uint32(sb[12:]); f != 0 {
		return nil, 0, corruptf("unknown flags %#x", f)
	}
	b := &Bootstrap{}
	b.chunkSize = le.Uint32(sb[16:])
	if !ValidChunkSize(b.chunkSize) {
		return nil, 0, corruptf("invalid chunk size %d", b.chunkSize)
	}
	b.compressor = Compressor(sb[20])
	if b.compressor != CompressNone && b.compressor != CompressZstd {
		return nil, 0, corruptf("unknown compressor %d", sb[20])
	}
	b.digest = DigestAlgo(sb[21])
	if !b.digest.Valid() {
		return nil, 0, corruptf("unknown digest algorithm %d", sb[21])
	}
	if le.Uint16(sb[22:]) != 0 {
		return nil, 0, corruptf("reserved superblock bytes are not zero")
	}
	b.inodes = le.Uint32(sb[24:])
	if root := le.Uint32(sb[28:]); root != uint32(RootIno) {
		return nil, 0, corruptf("root inode %d, want %d", root, RootIno)
	}
	if !bytes.Equal(sb[200:256], make([]byte, 56)) {
		return nil, 0, corruptf("reserved superblock bytes are not zero")
	}
	return b, le.Uint64(sb[32:]), nil
}

// parseSections checks the section table of superblock sb against a file
// of size bytes, and the record counts against the limits.
func (b *Bootstrap) parseSections(sb []byte, size uint64) error {
	end := uint64(superblockSize)
	for i := range numSections {
		s := section{le.Uint64(sb[72+16*i:]), le.Uint64(sb[80+16*i:])}
		if s.off < end || s.off > size || s.size > size-s.off {
			return corruptf("section %s [%d,+%d) overlaps or leaves the file of %d bytes", sectionNames[i], s.off, s.size, size)
		}
		if s.size%uint64(sectionRecord[i]) != 0 {
			return corruptf("section %s: %d bytes is not a whole number of %d-byte records", sectionNames[i], s.size, sectionRecord[i])
		}
		b.sec[i] = s
		end = s.off + s.size
	}
	if got := b.count(secInodes); got != uint64(b.inodes) || b.inodes == 0 || b.inodes > MaxInodes {
		return corruptf("inode count %d does not match its section (%d records) or the limit", b.inodes, got)
	}
	if b.count(secChunks) > MaxChunks {
		return corruptf("%d chunks exceeds the limit %d", b.count(secChunks), MaxChunks)
	}
	if b.count(secBlobs) > MaxBlobs {
		return corruptf("%d blobs exceeds the limit %d", b.count(secBlobs), MaxBlobs)
	}
	return nil
}

// checksum hashes data with the checksum field taken as zero.
func checksum(data []byte) [32]byte {
	h := sha256.New()
	h.Write(data[:40])
	h.Write(make([]byte, 32))
	h.Write(data[72:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Close releases the mapping made by Open. It is a no-op for Decode.
func (b *Bootstrap) Close() error {
	if b.unmap == nil {
		return nil
	}
	u := b.unmap
	b.unmap = nil
	return u()
}

func (b *Bootstrap) count(s int) uint64 { return b.sec[s].size / uint64(sectionRecord[s]) }

// record returns record i of section s; the caller has checked i < count.
func (b *Bootstrap) record(s int, i uint64) []byte {
	off := b.sec[s].off + i*uint64(sectionRecord[s])
	return b.data[off : off+uint64(sectionRecord[s])]
}

// ChunkSize is the image's chunk size in bytes.
func (b *Bootstrap) ChunkSize() uint32 { return b.chunkSize }

// Compressor is how compressed chunks are stored.
func (b *Bootstrap) Compressor() Compressor { return b.compressor }

// DigestAlgo is the algorithm of every chunk digest.
func (b *Bootstrap) DigestAlgo() DigestAlgo { return b.digest }

// InodeCount is the number of inodes; valid inodes are 1..InodeCount.
func (b *Bootstrap) InodeCount() uint32 { return b.inodes }

// ChunkCount and BlobCount give the table sizes.
func (b *Bootstrap) ChunkCount() uint32 { return uint32(b.count(secChunks)) }
func (b *Bootstrap) BlobCount() uint32  { return uint32(b.count(secBlobs)) }

// Bytes returns the encoded bootstrap. The caller must not modify it; it
// is valid until Close.
func (b *Bootstrap) Bytes() []byte { return b.data }

// Size is the bootstrap's length in bytes.
func (b *Bootstrap) Size() int { return len(b.data) }

// Inode decodes and checks inode ino.
func (b *Bootstrap) Inode(ino Ino) (Inode, error) {
	if ino == 0 || uint32(ino) > b.inodes {
		return Inode{}, corruptf("inode %d out of range 1..%d", ino, b.inodes)
	}
	r := b.record(secInodes, uint64(ino-1))
	in := Inode{
		Ino:       ino,
		Mode:      le.Uint32(r[0:]),
		UID:       le.Uint32(r[4:]),
		GID:       le.Uint32(r[8:]),
		Nlink:     le.Uint32(r[12:]),
		Size:      le.Uint64(r[16:]),
		MtimeSec:  int64(le.Uint64(r[24:])),
		MtimeNsec: le.Uint32(r[32:]),
		RdevMajor: le.Uint32(r[36:]),
		RdevMinor: le.Uint32(r[40:]),
		Parent:    Ino(le.Uint32(r[44:])),
		DataIndex: le.Uint32(r[48:]),
		DataCount: le.Uint32(r[52:]),
		XattrIdx:  le.Uint32(r[56:]),
		XattrCnt:  le.Uint32(r[60:]),
	}
	if !validType(in.Mode) || in.Mode&^uint32(ModeType|ModePerm) != 0 {
		return Inode{}, corruptf("inode %d: invalid mode %#o", ino, in.Mode)
	}
	if in.MtimeNsec >= 1e9 {
		return Inode{}, corruptf("inode %d: mtime nanoseconds %d", ino, in.MtimeNsec)
	}
	if in.Nlink == 0 {
		return Inode{}, corruptf("inode %d: nlink 0", ino)
	}
	if in.Parent == 0 || uint32(in.Parent) > b.inodes {
		return Inode{}, corruptf("inode %d: parent %d out of range", ino, in.Parent)
	}
	if uint64(in.XattrIdx)+uint64(in.XattrCnt) > b.count(secXattrs) || in.XattrCnt > MaxXattrsPerNode {
		return Inode{}, corruptf("inode %d: xattrs [%d,+%d) out of range", ino, in.XattrIdx, in.XattrCnt)
	}
	switch in.Mode & ModeType {
	case ModeDir:
		if uint64(in.DataIndex)+uint64(in.DataCount) > b.count(secDirents) {
			return Inode{}, corruptf("inode %d: dirents [%d,+%d) out of range", ino, in.DataIndex, in.DataCount)
		}
	case ModeReg:
		want := (in.Size + uint64(b.chunkSize) - 1) / uint64(b.chunkSize)
		if uint64(in.DataCount) != want || uint64(in.DataIndex)+uint64(in.DataCount) > b.count(secChunkRefs) {
			return Inode{}, corruptf("inode %d: %d chunk refs at %d for %d bytes (want %d)", ino, in.DataCount, in.DataIndex, in.Size, want)
		}
	case ModeLink:
		if in.DataCount == 0 || in.DataCount > MaxSymlinkLen || uint64(in.DataIndex)+uint64(in.DataCount) > b.sec[secStrings].size || in.Size != uint64(in.DataCount) {
			return Inode{}, corruptf("inode %d: symlink target [%d,+%d) out of range", ino, in.DataIndex, in.DataCount)
		}
	default:
		if in.DataCount != 0 || in.Size != 0 {
			return Inode{}, corruptf("inode %d: special file with data", ino)
		}
	}
	return in, nil
}

func (b *Bootstrap) str(off, n uint32) string {
	s := b.sec[secStrings]
	return string(b.data[s.off+uint64(off) : s.off+uint64(off)+uint64(n)])
}

// strBytes returns heap bytes without copying; callers check bounds.
func (b *Bootstrap) strBytes(off, n uint32) []byte {
	s := b.sec[secStrings]
	return b.data[s.off+uint64(off) : s.off+uint64(off)+uint64(n)]
}

func (b *Bootstrap) inHeap(off, n uint32) bool {
	return uint64(off)+uint64(n) <= b.sec[secStrings].size
}

// Dirent is one directory entry.
type Dirent struct {
	Name string
	Ino  Ino
}

// dirent decodes entry i of directory dir and checks it.
func (b *Bootstrap) dirent(dir Inode, i uint32) (Dirent, error) {
	r := b.record(secDirents, uint64(dir.DataIndex)+uint64(i))
	off, n, ino := le.Uint32(r[0:]), le.Uint32(r[4:]), Ino(le.Uint32(r[8:]))
	if n == 0 || n > MaxNameLen || !b.inHeap(off, n) {
		return Dirent{}, corruptf("directory %d entry %d: name [%d,+%d) out of range", dir.Ino, i, off, n)
	}
	if ino == 0 || uint32(ino) > b.inodes || ino == RootIno {
		return Dirent{}, corruptf("directory %d entry %d: inode %d out of range", dir.Ino, i, ino)
	}
	if le.Uint32(r[12:]) != 0 {
		return Dirent{}, corruptf("directory %d entry %d: reserved bytes set", dir.Ino, i)
	}
	return Dirent{Name: b.str(off, n), Ino: ino}, nil
}

// checkChild enforces the invariants that keep the tree acyclic: a child
// directory has a larger inode number than its parent and names it as
// parent, so every walk down the tree terminates.
func (b *Bootstrap) checkChild(dir Inode, d Dirent) (Inode, error) {
	if !validName(d.Name) {
		return Inode{}, corruptf("directory %d: invalid name %q", dir.Ino, d.Name)
	}
	in, err := b.Inode(d.Ino)
	if err != nil {
		return Inode{}, err
	}
	if in.IsDir() && (d.Ino <= dir.Ino || in.Parent != dir.Ino) {
		return Inode{}, corruptf("directory %d: subdirectory %q (inode %d) breaks the tree order", dir.Ino, d.Name, d.Ino)
	}
	return in, nil
}

// ReadDir returns the entries of directory ino, sorted by name.
func (b *Bootstrap) ReadDir(ino Ino) ([]Dirent, error) {
	dir, err := b.Inode(ino)
	if err != nil {
		return nil, err
	}
	if !dir.IsDir() {
		return nil, fmt.Errorf("inode %d: %w", ino, errNotDir)
	}
	out := make([]Dirent, 0, dir.DataCount)
	for i := range dir.DataCount {
		d, err := b.dirent(dir, i)
		if err != nil {
			return nil, err
		}
		if !validName(d.Name) {
			return nil, corruptf("directory %d: invalid name %q", ino, d.Name)
		}
		if i > 0 && out[i-1].Name >= d.Name {
			return nil, corruptf("directory %d: entries not sorted at %q", ino, d.Name)
		}
		out = append(out, d)
	}
	return out, nil
}

var errNotDir = errors.New("not a directory")

// Lookup finds name in directory dir by binary search. It returns
// fs.ErrNotExist when there is no such entry.
func (b *Bootstrap) Lookup(dir Ino, name string) (Inode, error) {
	d, err := b.Inode(dir)
	if err != nil {
		return Inode{}, err
	}
	if !d.IsDir() {
		return Inode{}, fmt.Errorf("inode %d: %w", dir, errNotDir)
	}
	var derr error
	i := sort.Search(int(d.DataCount), func(i int) bool {
		e, err := b.dirent(d, uint32(i))
		if err != nil {
			derr = err
			return true
		}
		return e.Name >= name
	})
	if derr != nil {
		return Inode{}, derr
	}
	if i == int(d.DataCount) {
		return Inode{}, fs.ErrNotExist
	}
	e, err := b.dirent(d, uint32(i))
	if err != nil {
		return Inode{}, err
	}
	if e.Name != name {
		return Inode{}, fs.ErrNotExist
	}
	return b.checkChild(d, e)
}

// LookupPath resolves a slash-separated path from the root without
// following symlinks ("" and "." are the root).
func (b *Bootstrap) LookupPath(p string) (Inode, error) {
	in, err := b.Inode(RootIno)
	if err != nil {
		return Inode{}, err
	}
	depth := 0
	for p != "" && p != "." {
		var name string
		name, p, _ = cutSlash(p)
		if name == "" || name == "." {
			continue
		}
		if depth++; depth > MaxPathDepth {
			return Inode{}, fmt.Errorf("path too deep: %w", fs.ErrInvalid)
		}
		in, err = b.Lookup(in.Ino, name)
		if err != nil {
			return Inode{}, err
		}
	}
	return in, nil
}

func cutSlash(p string) (string, string, bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i], p[i+1:], true
		}
	}
	return p, "", false
}

// Readlink returns a symlink's target.
func (b *Bootstrap) Readlink(in Inode) (string, error) {
	if !in.IsSymlink() {
		return "", fmt.Errorf("inode %d is not a symlink: %w", in.Ino, fs.ErrInvalid)
	}
	return b.str(in.DataIndex, in.DataCount), nil
}

// Xattrs returns an inode's extended attributes, sorted by name.
func (b *Bootstrap) Xattrs(in Inode) ([]Xattr, error) {
	out := make([]Xattr, 0, in.XattrCnt)
	for i := range in.XattrCnt {
		r := b.record(secXattrs, uint64(in.XattrIdx)+uint64(i))
		no, nn, vo, vn := le.Uint32(r[0:]), le.Uint32(r[4:]), le.Uint32(r[8:]), le.Uint32(r[12:])
		if nn == 0 || nn > MaxXattrNameLen || vn > MaxXattrValueLen || !b.inHeap(no, nn) || !b.inHeap(vo, vn) {
			return nil, corruptf("inode %d: xattr %d out of range", in.Ino, i)
		}
		out = append(out, Xattr{Name: b.str(no, nn), Value: append([]byte(nil), b.strBytes(vo, vn)...)})
	}
	return out, nil
}

// FileChunk returns the chunk holding stretch i of regular file in; see
// FileSegment for which of its bytes are the file's.
func (b *Bootstrap) FileChunk(in Inode, i uint32) (Chunk, error) {
	s, err := b.FileSegment(in, i)
	return s.Chunk, err
}

// FileSegment returns stretch i of regular file in, which holds file bytes
// [i*ChunkSize, min((i+1)*ChunkSize, Size)): the chunk and where in it
// those bytes are.
func (b *Bootstrap) FileSegment(in Inode, i uint32) (Segment, error) {
	if !in.IsReg() || i >= in.DataCount {
		return Segment{}, fmt.Errorf("inode %d has no chunk %d: %w", in.Ino, i, fs.ErrInvalid)
	}
	r := b.record(secChunkRefs, uint64(in.DataIndex)+uint64(i))
	c, err := b.Chunk(le.Uint32(r))
	if err != nil {
		return Segment{}, fmt.Errorf("inode %d chunk %d: %w", in.Ino, i, err)
	}
	want := uint64(b.chunkSize)
	if rest := in.Size - uint64(i)*uint64(b.chunkSize); rest < want {
		want = rest
	}
	off := le.Uint32(r[4:])
	if uint64(off)+want > uint64(c.Size) {
		return Segment{}, corruptf("inode %d chunk %d: %d bytes at %d do not fit in a chunk of %d", in.Ino, i, want, off, c.Size)
	}
	return Segment{Chunk: c, Off: off, Len: uint32(want)}, nil
}

// Chunk decodes and checks entry i of the chunk table.
func (b *Bootstrap) Chunk(i uint32) (Chunk, error) {
	if uint64(i) >= b.count(secChunks) {
		return Chunk{}, corruptf("chunk %d out of range (%d chunks)", i, b.count(secChunks))
	}
	r := b.record(secChunks, uint64(i))
	c := Chunk{
		Index:            i,
		Blob:             le.Uint32(r[32:]),
		Flags:            le.Uint32(r[36:]),
		CompressedOffset: le.Uint64(r[40:]),
		CompressedSize:   le.Uint32(r[48:]),
		Size:             le.Uint32(r[52:]),
		Ordinal:          le.Uint32(r[56:]),
	}
	copy(c.Digest[:], r[0:32])
	if err := CheckChunkFlags(c.Flags); err != nil {
		return Chunk{}, corruptf("chunk %d: %v", i, err)
	}
	if c.Algo() != b.digest {
		return Chunk{}, corruptf("chunk %d: digested with %s in a bootstrap of %s digests", i, c.Algo(), b.digest)
	}
	if c.Size == 0 || c.Size > b.chunkSize {
		return Chunk{}, corruptf("chunk %d: size %d outside 1..%d", i, c.Size, b.chunkSize)
	}
	if c.Compressed() {
		if c.CompressedSize == 0 || c.CompressedSize >= c.Size || b.compressor == CompressNone {
			return Chunk{}, corruptf("chunk %d: compressed size %d for %d bytes", i, c.CompressedSize, c.Size)
		}
	} else if c.CompressedSize != c.Size {
		return Chunk{}, corruptf("chunk %d: raw chunk stored in %d bytes, want %d", i, c.CompressedSize, c.Size)
	}
	blob, err := b.Blob(c.Blob)
	if err != nil {
		return Chunk{}, fmt.Errorf("chunk %d: %w", i, err)
	}
	if c.CompressedOffset > blob.CompressedSize || uint64(c.CompressedSize) > blob.CompressedSize-c.CompressedOffset {
		return Chunk{}, corruptf("chunk %d: [%d,+%d) beyond blob %d of %d bytes", i, c.CompressedOffset, c.CompressedSize, c.Blob, blob.CompressedSize)
	}
	if c.Ordinal >= blob.ChunkCount {
		return Chunk{}, corruptf("chunk %d: ordinal %d in blob %d of %d chunks", i, c.Ordinal, c.Blob, blob.ChunkCount)
	}
	if !bytes.Equal(r[60:64], make([]byte, 4)) {
		return Chunk{}, corruptf("chunk %d: reserved bytes set", i)
	}
	return c, nil
}

// Blob decodes entry i of the blob table.
func (b *Bootstrap) Blob(i uint32) (Blob, error) {
	if uint64(i) >= b.count(secBlobs) {
		return Blob{}, corruptf("blob %d out of range (%d blobs)", i, b.count(secBlobs))
	}
	r := b.record(secBlobs, uint64(i))
	bl := Blob{
		Index:            i,
		CompressedSize:   le.Uint64(r[32:]),
		UncompressedSize: le.Uint64(r[40:]),
		ChunkCount:       le.Uint32(r[48:]),
	}
	copy(bl.Digest[:], r[0:32])
	if !bytes.Equal(r[52:64], make([]byte, 12)) {
		return Blob{}, corruptf("blob %d: reserved bytes set", i)
	}
	return bl, nil
}

// Blobs returns the whole blob table.
func (b *Bootstrap) Blobs() ([]Blob, error) {
	out := make([]Blob, 0, b.count(secBlobs))
	for i := range uint32(b.count(secBlobs)) {
		bl, err := b.Blob(i)
		if err != nil {
			return nil, err
		}
		out = append(out, bl)
	}
	return out, nil
}

// Prefetch returns the prefetch table: inodes to fetch first, in order.
func (b *Bootstrap) Prefetch() ([]Ino, error) {
	n := b.count(secPrefetch)
	out := make([]Ino, 0, n)
	for i := range n {
		ino := Ino(le.Uint32(b.record(secPrefetch, i)))
		if ino == 0 || uint32(ino) > b.inodes {
			return nil, corruptf("prefetch entry %d: inode %d out of range", i, ino)
		}
		out = append(out, ino)
	}
	return out, nil
}
