package rafs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"runtime"
	"sort"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// LayerSource is one source layer, bottom first.
type LayerSource struct {
	// Name identifies the layer in errors (its digest, say).
	Name string
	// Open returns the layer's uncompressed tar stream. Close must report
	// any integrity failure of the stream (a digest mismatch found at its
	// end); Build reads the stream to EOF before closing it.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// BuildOptions configure Build. The zero value of each field means its
// default.
type BuildOptions struct {
	ChunkSize uint32 // default DefaultChunkSize
	// Uncompressed stores every chunk raw (compressor "none"); by default
	// chunks are zstd-compressed, each on its own.
	Uncompressed bool
	// Level is the zstd level: 1 fastest .. 4 best; default 1.
	Level int
	// Digest is the chunk digest algorithm; 0 means DefaultDigest.
	Digest DigestAlgo
	// Workers hash and compress chunks; default GOMAXPROCS.
	Workers int
	// BatchSize packs files smaller than a quarter of it, in tar order,
	// into shared chunks of up to this many bytes, so small files compress
	// together (as they do in a gzip stream) and a directory of them is
	// one fetch. Identical small files are stored once. 0 means the
	// default, DefaultBatchSize (capped at the chunk size); -1 disables.
	BatchSize int
	// Dict is a chunk dictionary: chunks it holds are referenced in its
	// blobs instead of being stored again. It must use Digest. With
	// DigestStoredBlake3 a chunk matches only when compressed to the
	// same bytes: a dictionary converted at another Level matches raw
	// chunks only.
	Dict *Bootstrap
	// Prefetch lists paths or path.Match globs (absolute, from the image
	// root) of files to put in the prefetch table; a directory stands for
	// every file below it. The contents of those files, from every layer,
	// are stored in one blob of their own, the prefetch blob, packed
	// together in tar order: a mount fetches them first in a few range
	// requests, and no chunk it fetches for them carries other files.
	Prefetch []string
	// BlobDir receives new blobs, each named by its digest's hex.
	BlobDir string
	// Progress, if set, is called with the number of content bytes read.
	Progress func(n int64)
	Logger   *slog.Logger
}

// BuildStats summarise what Build saw and stored.
type BuildStats struct {
	Layers       int
	Files        int    // regular files in the merged tree (inodes)
	Dirs         int    // directories
	Others       int    // symlinks, devices, fifos
	Hardlinks    int    // names beyond the first of an inode
	ContentBytes uint64 // file bytes read from all layers
	Pieces       int    // chunks cut from those bytes
	NewChunks    int    // chunks stored in new blobs
	// PrefetchChunks of the new chunks are in the prefetch blob.
	PrefetchChunks int
	DictChunks     int    // chunks referenced in the dictionary's blobs
	StoredBytes    uint64 // bytes written to new blobs
	RawBytes       uint64 // uncompressed bytes of the new chunks
}

// BuildResult is the output of Build.
type BuildResult struct {
	Bootstrap []byte
	// Blobs is the bootstrap's blob table: new blobs and referenced
	// dictionary blobs.
	Blobs []Blob
	// LayerBlobs maps each source layer to its new blob's index in Blobs,
	// or -1 when the layer stored no new chunk.
	LayerBlobs []int
	// DictBlobs lists indexes in Blobs that come from the dictionary.
	DictBlobs []int
	// PrefetchBlob is the index in Blobs of the blob holding the
	// prefetch files' new chunks, or -1 when there is none.
	PrefetchBlob int
	Stats        BuildStats
}

func (o *BuildOptions) defaults() error {
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if !ValidChunkSize(o.ChunkSize) {
		return fmt.Errorf("chunk size %d: want a power of two from %d to %d", o.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if o.Level == 0 {
		o.Level = 1
	}
	if o.Level < 1 || o.Level > 4 {
		return fmt.Errorf("compression level %d: want 1..4", o.Level)
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchSize > int(o.ChunkSize) {
		o.BatchSize = int(o.ChunkSize)
	}
	if o.BatchSize < -1 {
		return fmt.Errorf("batch size %d: want -1 (off), 0 (default) or a size", o.BatchSize)
	}
	if o.BlobDir == "" {
		return errors.New("no blob directory")
	}
	switch o.Digest {
	case 0:
		o.Digest = DefaultDigest
	case DigestSHA256, DigestBlake3, DigestStoredBlake3:
	default:
		return fmt.Errorf("unknown digest algorithm %d", o.Digest)
	}
	if o.Dict != nil && o.Dict.Compressor() != o.compressor() && o.Dict.ChunkCount() > 0 {
		return fmt.Errorf("chunk dictionary uses %s, this build %s", o.Dict.Compressor(), o.compressor())
	}
	if o.Dict != nil && o.Dict.DigestAlgo() != o.Digest && o.Dict.ChunkCount() > 0 {
		return fmt.Errorf("chunk dictionary digests chunks with %s, this build with %s (convert with --digest %s to use it)", o.Dict.DigestAlgo(), o.Digest, o.Dict.DigestAlgo())
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (o *BuildOptions) compressor() Compressor {
	if o.Uncompressed {
		return CompressNone
	}
	return CompressZstd
}

// builder holds the writer side's state; only the writer goroutine
// touches it after the pipeline starts.
type builder struct {
	opts       BuildOptions
	chunks     []Chunk
	chunkIdx   map[Digest]uint32 // by piece key: the digest of the content
	blobs      []Blob
	layerBlobs []int
	dictBlobs  map[uint32]int   // dict blob index -> our blob index
	dict       map[Digest]Chunk // by chunk digest
	pieceChunk []uint32
	seen       sync.Map // keys already stored, and digests of content in the dictionary
	stats      BuildStats
	hot        *prefetchSet // files whose chunks go to the prefetch blob
	hotBlob    int          // the prefetch blob's index in blobs, or -1

	// Reader side (the tar-reading goroutine only).
	readBytes uint64
	batch     *pendingBatch       // small files of one directory
	hotBatch  *pendingBatch       // small prefetch files, of any directory
	small     map[Digest]smallRef // small file contents already placed
	scratch   []byte
}

// DefaultBatchSize is the default BuildOptions.BatchSize.
const DefaultBatchSize = 512 << 10

// pendingBatch is a chunk of small files being filled; its sequence
// number is known only when it is sent, after the files that point to it.
type pendingBatch struct {
	dir    string
	buf    *[]byte
	seq    uint32
	sent   bool
	inodes []*inode
}

type smallRef struct {
	b   *pendingBatch
	off uint32
}

// Build merges layers into one tree, stores their chunks in one new blob
// per layer under opts.BlobDir and returns the bootstrap. Output is
// deterministic: the same layers and options give the same bytes,
// whatever the number of workers. On error, new blob files may remain in
// BlobDir; the caller owns that directory.
func Build(ctx context.Context, layers []LayerSource, opts BuildOptions) (*BuildResult, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	hot, err := compilePrefetch(opts.Prefetch)
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts, chunkIdx: map[Digest]uint32{}, dictBlobs: map[uint32]int{}, small: map[Digest]smallRef{},
		hot: hot, hotBlob: -1}
	if err := b.loadDict(); err != nil {
		return nil, err
	}
	t := newTree()
	inflight := max(4, min(2*opts.Workers+2, int(64<<20/opts.ChunkSize)))
	jobs := make(chan *piece, inflight)
	ordered := make(chan *piece, inflight)
	bufs := sync.Pool{New: func() any { s := make([]byte, opts.ChunkSize); return &s }}
	outs := sync.Pool{New: func() any { s := make([]byte, 0, opts.ChunkSize+opts.ChunkSize/64+64); return &s }}

	g, gctx := errgroup.WithContext(ctx)
	for range opts.Workers {
		g.Go(func() error {
			var enc *zstd.Encoder
			if !opts.Uncompressed {
				var err error
				enc, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1),
					zstd.WithEncoderLevel(zstd.EncoderLevel(opts.Level)), zstd.WithWindowSize(zstdWindow(opts.ChunkSize)))
				if err != nil {
					return err
				}
				defer enc.Close()
			}
			for p := range jobs {
				op := outs.Get().(*[]byte)
				*op = hashAndCompress(p, opts.Digest, enc, &b.seen, *op)
				if p.stored == nil {
					outs.Put(op)
				} else {
					p.stored = *op
				}
				close(p.done)
			}
			return nil
		})
	}
	g.Go(func() error { return b.write(gctx, ordered, &bufs, &outs) })
	g.Go(func() error {
		defer close(ordered)
		defer close(jobs)
		var seq uint32
		for i, l := range layers {
			if err := b.readLayer(gctx, t, i, l, &seq, jobs, ordered, &bufs); err != nil {
				return fmt.Errorf("layer %d (%s): %w", i, l.Name, err)
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	b.stats.Layers = len(layers)
	b.stats.ContentBytes = b.readBytes

	prefetch := matchPrefetch(t, hot)
	countTree(t, &b.stats)
	boot, err := t.encode(encodeInput{
		chunkSize: opts.ChunkSize, compressor: opts.compressor(), digest: opts.Digest, chunks: b.chunks,
		blobs: b.blobs, pieceChunk: b.pieceChunk, prefetch: prefetch,
	})
	if err != nil {
		return nil, err
	}
	res := &BuildResult{Bootstrap: boot, Blobs: b.blobs, LayerBlobs: b.layerBlobs, PrefetchBlob: b.hotBlob, Stats: b.stats}
	for _, i := range b.dictBlobs {
		res.DictBlobs = append(res.DictBlobs, i)
	}
	sort.Ints(res.DictBlobs)
	return res, nil
}

// zstdWindow keeps the encoder's window no larger than a chunk: chunks
// are independent, and a smaller window saves memory in every worker.
func zstdWindow(chunk uint32) int {
	w := int(chunk)
	if w < zstd.MinWindowSize {
		w = zstd.MinWindowSize
	}
	return w
}

func (b *builder) loadDict() error {
	d := b.opts.Dict
	if d == nil {
		return nil
	}
	b.dict = make(map[Digest]Chunk, d.ChunkCount())
	for i := range d.ChunkCount() {
		c, err := d.Chunk(i)
		if err != nil {
			return fmt.Errorf("chunk dictionary: %w", err)
		}
		if _, ok := b.dict[c.Digest]; !ok {
			b.dict[c.Digest] = c
			// A digest of content is a piece's key: a piece the
			// dictionary holds need not be compressed. A digest of
			// stored bytes is known only after compressing.
			if !c.StoredDigest() {
				b.seen.Store(c.Digest, struct{}{})
			}
		}
	}
	return nil
}

// readLayer parses one layer's tar stream, merges its entries into t and
// feeds file contents to the pipeline in order.
func (b *builder) readLayer(ctx context.Context, t *tree, layer int, l LayerSource, seq *uint32,
	jobs, ordered chan<- *piece, bufs *sync.Pool) error {
	rc, err := l.Open(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	cs := uint64(b.opts.ChunkSize)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		in, err := t.apply(layer, h)
		if err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
		if in == nil {
			continue
		}
		b.readBytes += in.size
		hot := !b.hot.empty() && b.hot.covers(path.Clean("/"+h.Name))
		if b.opts.BatchSize > 0 && in.size > 0 && in.size < uint64(b.opts.BatchSize/4) {
			if err := b.addSmall(ctx, layer, in, tr, h.Name, hot, seq, jobs, ordered, bufs); err != nil {
				return err
			}
			continue
		}
		for off := uint64(0); off < in.size; off += cs {
			n := min(cs, in.size-off)
			bp := bufs.Get().(*[]byte)
			*bp = (*bp)[:n]
			if _, err := io.ReadFull(tr, *bp); err != nil {
				bufs.Put(bp)
				return fmt.Errorf("entry %q: read bytes %d..%d of %d: %w", h.Name, off, off+n, in.size, err)
			}
			if *seq == 1<<32-1 {
				return fmt.Errorf("more than %d chunks", uint32(1<<32-1))
			}
			in.pieces = append(in.pieces, *seq)
			if b.opts.Progress != nil {
				b.opts.Progress(int64(n))
			}
			if err := b.send(ctx, bp, layer, hot, seq, jobs, ordered); err != nil {
				return err
			}
		}
	}
	for _, hot := range []bool{false, true} {
		if err := b.flushBatch(ctx, layer, hot, seq, jobs, ordered); err != nil {
			return err
		}
	}
	// Read to the end so the source can check its digest, then let it.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("read to end: %w", err)
	}
	if err := rc.Close(); err != nil {
		return err
	}
	select {
	case ordered <- &piece{layer: layer, end: true}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// send hands one piece to the workers and, in order, to the writer.
// A hot piece belongs in the prefetch blob.
func (b *builder) send(ctx context.Context, bp *[]byte, layer int, hot bool, seq *uint32, jobs, ordered chan<- *piece) error {
	if *seq == 1<<32-1 {
		return fmt.Errorf("more than %d chunks", uint32(1<<32-1))
	}
	p := &piece{seq: *seq, layer: layer, hot: hot, buf: bp, done: make(chan struct{})}
	*seq++
	select {
	case ordered <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case jobs <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// addSmall reads a small file into the current batch, or the current
// prefetch batch when hot (or points it at an identical small file
// already placed).
func (b *builder) addSmall(ctx context.Context, layer int, in *inode, r io.Reader, name string, hot bool, seq *uint32, jobs, ordered chan<- *piece, bufs *sync.Pool) error {
	if cap(b.scratch) < int(in.size) {
		b.scratch = make([]byte, b.opts.BatchSize/4)
	}
	d := b.scratch[:in.size]
	if _, err := io.ReadFull(r, d); err != nil {
		return fmt.Errorf("entry %q: read %d bytes: %w", name, in.size, err)
	}
	if b.opts.Progress != nil {
		b.opts.Progress(int64(in.size))
	}
	sum := b.opts.Digest.Sum(d)
	if ref, ok := b.small[sum]; ok {
		in.batchOff = ref.off
		b.pointAt(in, ref.b)
		return nil
	}
	// A batch holds files of one directory: inserting a file elsewhere in
	// a new version of the layer then moves no other batch's boundaries,
	// so the rest still dedup against the old version's chunks.
	// Prefetch files are packed whatever their directory: what matters
	// for them is that a batch holds nothing else.
	dir := path.Dir(path.Clean("/" + name))
	if hot {
		dir = ""
	}
	cur := b.batchOf(hot)
	if *cur != nil && (len(*(*cur).buf)+len(d) > b.opts.BatchSize || (*cur).dir != dir) {
		if err := b.flushBatch(ctx, layer, hot, seq, jobs, ordered); err != nil {
			return err
		}
	}
	if *cur == nil {
		bp := bufs.Get().(*[]byte)
		*bp = (*bp)[:0]
		*cur = &pendingBatch{buf: bp, dir: dir}
	}
	pb := *cur
	in.batchOff = uint32(len(*pb.buf))
	*pb.buf = append(*pb.buf, d...)
	b.small[sum] = smallRef{b: pb, off: in.batchOff}
	b.pointAt(in, pb)
	return nil
}

// batchOf returns the batch being filled with small files: the prefetch
// files' one when hot.
func (b *builder) batchOf(hot bool) **pendingBatch {
	if hot {
		return &b.hotBatch
	}
	return &b.batch
}

func (b *builder) pointAt(in *inode, pb *pendingBatch) {
	if pb.sent {
		in.pieces = []uint32{pb.seq}
		return
	}
	pb.inodes = append(pb.inodes, in)
}

// flushBatch sends the current batch (the prefetch one when hot), if
// any, as one piece.
func (b *builder) flushBatch(ctx context.Context, layer int, hot bool, seq *uint32, jobs, ordered chan<- *piece) error {
	cur := b.batchOf(hot)
	pb := *cur
	if pb == nil {
		return nil
	}
	*cur = nil
	pb.seq, pb.sent = *seq, true
	for _, in := range pb.inodes {
		in.pieces = []uint32{pb.seq}
	}
	pb.inodes = nil
	return b.send(ctx, pb.buf, layer, hot, seq, jobs, ordered)
}

// write consumes pieces in order: dedups them, appends new ones to the
// current layer's blob (hot ones to the prefetch blob, which stays open
// across layers) and records every piece's chunk index.
func (b *builder) write(ctx context.Context, ordered <-chan *piece, bufs, outs *sync.Pool) error {
	var bw, hw *blobWriter
	defer func() {
		for _, w := range []*blobWriter{bw, hw} {
			if w != nil {
				w.abort()
			}
		}
	}()
	for p := range ordered {
		if p.end {
			idx := -1
			if bw != nil {
				w := bw
				bw = nil
				if err := b.finishBlob(w); err != nil {
					return err
				}
				idx = int(w.index)
			}
			b.layerBlobs = append(b.layerBlobs, idx)
			continue
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		w := &bw
		if p.hot {
			w = &hw
		}
		idx, err := b.place(p, w)
		if err != nil {
			return err
		}
		b.pieceChunk = append(b.pieceChunk, idx)
		b.stats.Pieces++
		bufs.Put(p.buf)
		if p.stored != nil {
			s := p.stored[:0]
			outs.Put(&s)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if hw != nil {
		w := hw
		hw = nil
		if err := b.finishBlob(w); err != nil {
			return err
		}
		b.hotBlob = int(w.index)
		b.stats.PrefetchChunks = int(w.n)
	}
	return nil
}

// finishBlob completes w and fills its slot in the blob table.
func (b *builder) finishBlob(w *blobWriter) error {
	d, err := w.finish()
	if err != nil {
		return err
	}
	b.blobs[w.index] = Blob{Index: w.index, Digest: d, CompressedSize: w.size, UncompressedSize: w.raw, ChunkCount: w.n}
	b.stats.StoredBytes += w.size
	b.stats.RawBytes += w.raw
	return nil
}

// place returns the chunk index for a piece, storing it if it is new.
func (b *builder) place(p *piece, bw **blobWriter) (uint32, error) {
	if idx, ok := b.chunkIdx[p.key]; ok {
		return idx, nil
	}
	if len(b.chunks) >= MaxChunks {
		return 0, fmt.Errorf("more than %d unique chunks", MaxChunks)
	}
	idx := uint32(len(b.chunks))
	// With DigestStoredBlake3 the dictionary matches only a chunk
	// compressed to the same frame: at the same level (FORMAT.md).
	if dc, ok := b.dict[p.digest]; ok && dc.Size == uint32(len(*p.buf)) {
		bi, ok := b.dictBlobs[dc.Blob]
		if !ok {
			db, err := b.opts.Dict.Blob(dc.Blob)
			if err != nil {
				return 0, fmt.Errorf("chunk dictionary: %w", err)
			}
			bi = len(b.blobs)
			db.Index = uint32(bi)
			b.blobs = append(b.blobs, db)
			b.dictBlobs[dc.Blob] = bi
		}
		dc.Index, dc.Blob = idx, uint32(bi)
		b.chunks = append(b.chunks, dc)
		b.chunkIdx[p.key] = idx
		b.stats.DictChunks++
		return idx, nil
	}
	if *bw == nil {
		w, err := newBlobWriter(b.opts.BlobDir)
		if err != nil {
			return 0, err
		}
		// Reserve the blob's table slot now so dictionary blobs met while
		// it is open take later ones.
		w.index = uint32(len(b.blobs))
		b.blobs = append(b.blobs, Blob{Index: w.index})
		*bw = w
	}
	stored, flags := *p.buf, b.opts.Digest.flag()
	if p.stored != nil {
		stored, flags = p.stored, flags|ChunkCompressed
	}
	ordinal := (*bw).n
	off, err := (*bw).append(stored, len(*p.buf))
	if err != nil {
		return 0, err
	}
	c := Chunk{Index: idx, Digest: p.digest, Blob: (*bw).index, Flags: flags,
		CompressedOffset: off, CompressedSize: uint32(len(stored)), Size: uint32(len(*p.buf)), Ordinal: ordinal}
	b.chunks = append(b.chunks, c)
	b.chunkIdx[p.key] = idx
	b.seen.Store(p.key, struct{}{})
	b.stats.NewChunks++
	return idx, nil
}
