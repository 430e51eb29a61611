package rafs

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// DefaultMaxBootstrapSize is the largest bootstrap ReadBootstrap and
// ReadBootstrapLayer accept unless told otherwise (the mount and peer
// configurations' max_bootstrap_bytes). It is sized for a few million
// files. A file costs an inode (64 B), a dirent (16 B), a chunk ref (8 B)
// and its name in the string heap (~20 B); a file with chunks of its own
// adds a chunk record (64 B) per chunk, while small files share batched
// chunks. Real images measure 103-106 B per inode all told
// (integration/bench/RESULTS.md). At 128 B per file, 512 MiB holds 4 Mi
// files; at a pessimistic 256 B (every file its own chunk, ~100-byte
// names) it still holds 2 Mi.
const DefaultMaxBootstrapSize = 512 << 20

// maxBootstrapWindow is the largest zstd window a bootstrap layer may
// use: the window of the converter's encoder (klauspost/compress's
// default, 8 MiB). The decoder allocates its window before it yields a
// byte, so a frame header alone must not be able to ask for more.
const maxBootstrapWindow = 8 << 20

// maxBootstrapRatio bounds how many bytes a bootstrap layer may inflate
// to per compressed byte read, past the first ratioSlack bytes. Real
// bootstraps compress 4.4-5x (integration/bench/RESULTS.md); the most
// repetitive ones we could build, 50,000 empty files or hardlinks in
// one directory, 20-34x: every dirent holds an inode number and a name
// offset that no other does, so no record repeats another whole. zstd
// can reach 32,768x on zeros (a 4-byte block for 128 KiB). Without this
// bound a layer of a few KiB whose superblock declares just under the
// size limit would be inflated in full before the checksum could refuse
// it: 512 MiB, seconds of CPU and twice that in memory.
const (
	maxBootstrapRatio = 256
	ratioSlack        = 1 << 20
)

// firstReadSize is where the buffer of a streamed bootstrap starts; it
// doubles as bytes arrive, never past the size the superblock declares.
const firstReadSize = 64 << 10

// ErrTooLarge is returned (wrapped, with the sizes) for a bootstrap whose
// superblock declares more bytes than the reader's limit.
var ErrTooLarge = errors.New("rafs: bootstrap exceeds the size limit")

// ReadOptions bound ReadBootstrap and ReadBootstrapLayer.
type ReadOptions struct {
	// MaxSize is the largest bootstrap accepted, in bytes: 0 means
	// DefaultMaxBootstrapSize; more than MaxBootstrapSize means
	// MaxBootstrapSize.
	MaxSize int64
	// ExpectSize, if positive, is the size the caller was told (a
	// manifest annotation): a superblock that declares another size is
	// refused before anything more is read. It is checked, never used to
	// size a buffer.
	ExpectSize int64
}

// Limit is the effective MaxSize.
func (o ReadOptions) Limit() int64 {
	switch {
	case o.MaxSize <= 0:
		return DefaultMaxBootstrapSize
	case o.MaxSize > MaxBootstrapSize:
		return MaxBootstrapSize
	}
	return o.MaxSize
}

func (o ReadOptions) limit() uint64 { return uint64(o.Limit()) }

// MaxLayerSize is the most bytes a bootstrap within Limit takes as a
// layer: zstd stores data that does not compress in raw blocks of up to
// 128 KiB, each with a 3-byte header, after a frame header of at most 18
// bytes. A layer that says it is larger can be refused unread.
func (o ReadOptions) MaxLayerSize() int64 {
	n := o.Limit()
	return n + 3*(n/(128<<10)+1) + 64
}

// ReadBootstrap reads one uncompressed bootstrap from r and returns its
// bytes, for Decode. It reads the superblock first and checks it alone
// (magic, version, fields, section table) and the length it declares
// against opts; then it reads exactly that many bytes, growing its buffer
// only as bytes arrive, and requires r to end there. So whatever r would
// yield, the buffers ReadBootstrap allocates (it doubles the one it fills)
// add up to at most 64 KiB plus four times the bytes received, and to at
// most twice the declared size, itself at most the limit.
//
// Errors wrap ErrTooLarge (the declared size is over the limit) or
// ErrCorrupt (a bad superblock, a stream shorter or longer than declared,
// a size other than ExpectSize); a read error of r is returned wrapped.
// The bytes are not checksummed or decoded past the superblock: Decode
// does that.
func ReadBootstrap(r io.Reader, opts ReadOptions) ([]byte, error) {
	sb := make([]byte, superblockSize, firstReadSize)
	if n, err := io.ReadFull(r, sb); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corruptf("stream ends after %d bytes, inside the %d-byte superblock", n, superblockSize)
		}
		return nil, fmt.Errorf("read bootstrap superblock: %w", err)
	}
	size, err := checkStreamHeader(sb, opts)
	if err != nil {
		return nil, err
	}
	buf := sb
	for uint64(len(buf)) < size {
		if len(buf) == cap(buf) {
			next := make([]byte, len(buf), min(2*uint64(cap(buf)), size))
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):min(uint64(cap(buf)), size)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if uint64(len(buf)) == size {
				break
			}
			return nil, corruptf("stream ends after %d of the %d bytes its superblock declares", len(buf), size)
		}
		if err != nil {
			return nil, fmt.Errorf("read bootstrap at byte %d of %d: %w", len(buf), size, err)
		}
	}
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n > 0 {
		return nil, corruptf("stream goes on past the %d bytes its superblock declares", size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read bootstrap end: %w", err)
	}
	return buf, nil
}

// checkStreamHeader checks superblock sb on its own and returns the size
// it declares, once that is known to be within the limit.
func checkStreamHeader(sb []byte, opts ReadOptions) (uint64, error) {
	b, size, err := parseHeader(sb)
	if err != nil {
		return 0, err
	}
	if limit := opts.limit(); size > limit {
		return 0, fmt.Errorf("%w: superblock declares %d bytes, the limit is %d (%d MiB)", ErrTooLarge, size, limit, limit>>20)
	}
	if size < superblockSize {
		return 0, corruptf("superblock declares %d bytes, less than itself", size)
	}
	if opts.ExpectSize > 0 && size != uint64(opts.ExpectSize) {
		return 0, corruptf("superblock declares %d bytes, the manifest says %d", size, opts.ExpectSize)
	}
	if err := b.parseSections(sb, size); err != nil {
		return 0, err
	}
	return size, nil
}

// ReadBootstrapLayer reads a bootstrap layer as an OCI manifest carries it
// (MediaTypeBootstrap: the bootstrap compressed with zstd) from r and
// returns the bootstrap's bytes, bounded as ReadBootstrap bounds them: it
// inflates the superblock, checks it, then inflates at most the size the
// superblock declares and one byte more to see that the stream ends
// there. The zstd window may not exceed 8 MiB (the converter writes
// that), so the decoder's own memory is bounded too. A zstd error is
// returned wrapped; see ReadBootstrap for the others. Checking the layer
// against its digest is the caller's job.
func ReadBootstrapLayer(r io.Reader, opts ReadOptions) ([]byte, error) {
	// In a stream MaxMemory bounds the window a frame may declare (and a
	// single-segment frame's content size, which is its window); for a
	// small limit the window need not be larger than the bootstrap. A
	// floor of 64 KiB keeps the encoder's windows for tiny bootstraps.
	mem := max(min(opts.limit()+1, maxBootstrapWindow), 64<<10)
	in := &countReader{r: r}
	dec, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxBootstrapWindow), zstd.WithDecoderMaxMemory(mem))
	if err != nil {
		return nil, fmt.Errorf("bootstrap layer: %w", err)
	}
	defer dec.Close()
	data, err := ReadBootstrap(&ratioReader{dec: dec, in: in}, opts)
	if err != nil {
		return nil, fmt.Errorf("bootstrap layer: %w", err)
	}
	return data, nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ratioReader yields what dec inflates from in until the output outgrows
// maxBootstrapRatio times the input read so far (past ratioSlack).
type ratioReader struct {
	dec io.Reader
	in  *countReader
	out int64
}

func (r *ratioReader) Read(p []byte) (int, error) {
	// Ask for no more than the ratio allows now, plus one byte to see
	// whether the stream would go beyond it.
	allowed := maxBootstrapRatio*r.in.n + ratioSlack - r.out
	if allowed < 0 {
		allowed = 0
	}
	if int64(len(p)) > allowed+1 {
		p = p[:allowed+1]
	}
	n, err := r.dec.Read(p)
	r.out += int64(n)
	if r.out > maxBootstrapRatio*r.in.n+ratioSlack {
		return 0, corruptf("layer inflates to over %d bytes from %d: more than %dx, which no bootstrap compresses to", r.out-1, r.in.n, maxBootstrapRatio)
	}
	return n, err
}
