package rafs

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// piece is one chunk-sized slice of file content on its way through the
// pipeline: read in order, hashed and compressed by any worker, stored in
// order by the writer.
type piece struct {
	seq   uint32
	layer int
	hot   bool    // content of prefetch files: stored in the prefetch blob
	buf   *[]byte // content; len is the chunk size
	// end marks the end of a layer instead of content.
	end bool

	done chan struct{}
	// key is the digest of the content (algo.Sum): the builder dedups
	// by it. digest is the chunk record's: key, but with
	// DigestStoredBlake3 that of the stored bytes, known only once
	// compressed (so unset, and not needed, for a piece skipped as a
	// duplicate of one already stored).
	key        Digest
	digest     Digest
	stored     []byte // compressed bytes, or nil when stored raw or skipped
	compressed bool
}

// hashAndCompress is a worker's job on one piece. seen lets it skip
// compressing chunks the writer already stored (or, unless algo is
// DigestStoredBlake3, that the dictionary holds), by key.
func hashAndCompress(p *piece, algo DigestAlgo, enc *zstd.Encoder, seen *sync.Map, out []byte) []byte {
	data := *p.buf
	p.key = algo.Sum(data)
	p.digest = p.key // a raw chunk's, under every algorithm
	p.stored = nil
	if _, dup := seen.Load(p.key); dup || enc == nil {
		return out
	}
	out = enc.EncodeAll(data, out[:0])
	if len(out) < len(data) {
		p.stored = out
		p.compressed = true
		if algo == DigestStoredBlake3 {
			p.digest = StoredSum(true, out)
		}
	}
	return out
}

// blobWriter appends stored chunks to one layer's blob file, hashing as it
// goes, and names the file by its digest when it is finished.
type blobWriter struct {
	dir   string
	index uint32 // slot in the blob table
	f     *os.File
	h     hash.Hash
	size  uint64
	raw   uint64
	n     uint32
}

func newBlobWriter(dir string) (*blobWriter, error) {
	f, err := os.CreateTemp(dir, ".blob-*")
	if err != nil {
		return nil, fmt.Errorf("create blob: %w", err)
	}
	return &blobWriter{dir: dir, f: f, h: sha256.New()}, nil
}

func (w *blobWriter) append(stored []byte, rawSize int) (uint64, error) {
	off := w.size
	if _, err := w.f.Write(stored); err != nil {
		return 0, fmt.Errorf("write blob: %w", err)
	}
	w.h.Write(stored)
	w.size += uint64(len(stored))
	w.raw += uint64(rawSize)
	w.n++
	return off, nil
}

// finish closes the file and renames it to its digest's hex.
func (w *blobWriter) finish() (Digest, error) {
	var d Digest
	w.h.Sum(d[:0])
	if err := w.f.Close(); err != nil {
		os.Remove(w.f.Name())
		return d, fmt.Errorf("close blob: %w", err)
	}
	if err := os.Rename(w.f.Name(), BlobPath(w.dir, d)); err != nil {
		os.Remove(w.f.Name())
		return d, fmt.Errorf("name blob: %w", err)
	}
	return d, nil
}

func (w *blobWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// BlobPath is where a builder puts, and a local blob directory holds, the
// blob with digest d: DIR/<hex>.
func BlobPath(dir string, d Digest) string {
	return filepath.Join(dir, fmt.Sprintf("%x", d[:]))
}
