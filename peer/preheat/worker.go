package preheat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// Node is what a preheat reads through: the peer's node (peer.Node).
type Node interface {
	// Adopt takes chunks cs of blob, which a verified bootstrap says are
	// part of it: those the node cache holds are recorded as held for
	// blob and announced, without their bytes being read. It returns the
	// others, in order. Safe for concurrent use.
	Adopt(blob rafs.Digest, cs []rafs.Chunk) (missing []rafs.Chunk)
	// ReadChunks gets chunks of blob into the node cache (from peers or
	// up's registry) and calls deliver for each, in order, once it is
	// cached and announced; see proxy.ChunkSource.
	ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
		deliver func(i int, c rafs.Chunk, stored []byte) error) error
}

// Worker does the preheats a scheduler asks this peer for.
type Worker struct {
	node Node
	cfg  Config
	log  *slog.Logger
}

// New returns a Worker that reads through n. log may be nil.
func New(n Node, cfg Config, log *slog.Logger) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("preheat config: %w", err)
	}
	if n == nil {
		return nil, errors.New("preheat: node is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Worker{node: n, cfg: cfg, log: log}, nil
}

// Preheat fetches the chunks of image (every chunk, or with prefetchOnly
// those of the files of its prefetch table) into the node cache. It
// calls total with what it is to fetch once the chunks are listed, and
// done with each chunk's stored bytes as it is in; chunks already cached
// count at once and cost no read. It returns when every chunk is in, one
// read failed, or ctx is done. It implements scheduler/client.Preheater.
func (w *Worker) Preheat(ctx context.Context, image string, prefetchOnly bool, total func(chunks, bytes uint64), done func(bytes uint64)) error {
	// A transport of its own, so that its connections close with it.
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	img, up, err := w.open(ctx, image, tr)
	if err != nil {
		return fmt.Errorf("open image: %w", err)
	}
	defer img.Close()
	blobs, err := listChunks(img.Bootstrap(), prefetchOnly)
	if err != nil {
		return fmt.Errorf("list chunks: %w", err)
	}
	for _, b := range blobs {
		var bytes uint64
		for _, ch := range b.chunks {
			bytes += uint64(ch.CompressedSize)
		}
		total(uint64(len(b.chunks)), bytes)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(w.cfg.Parallel)
	for _, b := range blobs {
		for batch := range slices.Chunk(b.chunks, w.cfg.BatchChunks) {
			if gctx.Err() != nil {
				break
			}
			miss := w.node.Adopt(b.digest, batch)
			j := 0 // miss is a subsequence of batch
			for _, ch := range batch {
				if j < len(miss) && miss[j].Index == ch.Index {
					j++
					continue
				}
				done(uint64(ch.CompressedSize))
			}
			if len(miss) == 0 {
				continue
			}
			g.Go(func() error {
				err := w.node.ReadChunks(gctx, up, b.digest, miss, func(i int, _ rafs.Chunk, _ []byte) error {
					done(uint64(miss[i].CompressedSize))
					return nil
				})
				if err != nil {
					return fmt.Errorf("blob %s: %w", b.digest, err)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
