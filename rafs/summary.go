package rafs

// Summary describes an image from its bootstrap alone.
type Summary struct {
	Files          int     `json:"files"`
	Dirs           int     `json:"dirs"`
	Symlinks       int     `json:"symlinks"`
	Others         int     `json:"others"` // devices, fifos, sockets
	Hardlinks      int     `json:"hardlinks"`
	Bytes          uint64  `json:"bytes"`      // file content, each inode once
	ChunkRefs      uint64  `json:"chunk_refs"` // chunks listed by files
	UniqueChunks   int     `json:"unique_chunks"`
	UniqueBytes    uint64  `json:"unique_bytes"` // uncompressed bytes of distinct chunks
	StoredBytes    uint64  `json:"stored_bytes"` // their stored (compressed) bytes
	DedupRatio     float64 `json:"dedup_ratio"`  // Bytes / UniqueBytes
	CompressRatio  float64 `json:"compress_ratio"`
	Blobs          int     `json:"blobs"`
	BlobBytes      uint64  `json:"blob_bytes"`
	Prefetch       int     `json:"prefetch_entries"`
	ChunkSize      uint32  `json:"chunk_size"`
	Compressor     string  `json:"compressor"`
	Digest         string  `json:"digest"` // chunk digest algorithm
	BootstrapBytes int     `json:"bootstrap_bytes"`
}

// Summarize walks the whole tree once.
func Summarize(b *Bootstrap) (Summary, error) {
	s := Summary{ChunkSize: b.ChunkSize(), Compressor: b.Compressor().String(), Digest: b.DigestAlgo().String(), BootstrapBytes: b.Size()}
	seen := map[Ino]bool{}
	used := map[uint32]bool{}
	err := walkEntries(b, func(e entry) error {
		if seen[e.in.Ino] {
			s.Hardlinks++
			return nil
		}
		seen[e.in.Ino] = true
		switch e.in.Mode & ModeType {
		case ModeDir:
			s.Dirs++
		case ModeReg:
			s.Files++
			s.Bytes += e.in.Size
			for i := range e.in.DataCount {
				c, err := b.FileChunk(e.in, i)
				if err != nil {
					return err
				}
				s.ChunkRefs++
				if !used[c.Index] {
					used[c.Index] = true
					s.UniqueBytes += uint64(c.Size)
					s.StoredBytes += uint64(c.CompressedSize)
				}
			}
		case ModeLink:
			s.Symlinks++
		default:
			s.Others++
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	s.UniqueChunks = len(used)
	if s.UniqueBytes > 0 {
		s.DedupRatio = float64(s.Bytes) / float64(s.UniqueBytes)
		s.CompressRatio = float64(s.StoredBytes) / float64(s.UniqueBytes)
	}
	blobs, err := b.Blobs()
	if err != nil {
		return s, err
	}
	s.Blobs = len(blobs)
	for _, bl := range blobs {
		s.BlobBytes += bl.CompressedSize
	}
	p, err := b.Prefetch()
	if err != nil {
		return s, err
	}
	s.Prefetch = len(p)
	return s, nil
}
