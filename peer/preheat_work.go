package peer

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"damselfly/peer/cache"
	"damselfly/rafs"
	rimage "damselfly/rafs/image"
	"damselfly/rafs/registry"
	"damselfly/rafs/transport"
	"damselfly/scheduler/preheatwire"
)

// preheatBlob is the chunks of one blob a preheat fetches, ascending by
// ordinal (adjacent chunks then merge into one origin request).
type preheatBlob struct {
	digest rafs.Digest
	chunks []rafs.Chunk
}

// preheatCounts are a preheat's counters, read by the progress writer
// while the fetch goroutines add to them.
type preheatCounts struct {
	chunksDone, chunksTotal atomic.Uint64
	bytesDone, bytesTotal   atomic.Uint64
}

func (c *preheatCounts) snapshot() preheatwire.Counts {
	// Totals are loaded last so that done never passes them.
	out := preheatwire.Counts{ChunksDone: c.chunksDone.Load(), BytesDone: c.bytesDone.Load()}
	out.ChunksTotal = max(c.chunksTotal.Load(), out.ChunksDone)
	out.BytesTotal = max(c.bytesTotal.Load(), out.BytesDone)
	return out
}

func (c *preheatCounts) done(stored int) {
	c.chunksDone.Add(1)
	c.bytesDone.Add(uint64(stored))
}

// preheatChunks lists the chunks to fetch: every chunk of the bootstrap,
// or with prefetchOnly those of the files of its prefetch table; each
// once, grouped by blob.
func preheatChunks(b *rafs.Bootstrap, prefetchOnly bool) ([]preheatBlob, error) {
	blobs, err := b.Blobs()
	if err != nil {
		return nil, err
	}
	seen := make(map[uint32]bool)
	per := make([][]rafs.Chunk, len(blobs))
	add := func(c rafs.Chunk) {
		if !seen[c.Index] {
			seen[c.Index] = true
			per[c.Blob] = append(per[c.Blob], c)
		}
	}
	if prefetchOnly {
		inos, err := b.Prefetch()
		if err != nil {
			return nil, err
		}
		for _, ino := range inos {
			in, err := b.Inode(ino)
			if err != nil {
				return nil, err
			}
			if !in.IsReg() {
				continue
			}
			for i := range in.DataCount {
				c, err := b.FileChunk(in, i)
				if err != nil {
					return nil, err
				}
				add(c)
			}
		}
	} else {
		for i := range b.ChunkCount() {
			c, err := b.Chunk(i)
			if err != nil {
				return nil, err
			}
			add(c)
		}
	}
	var out []preheatBlob
	for i, cs := range per {
		if len(cs) == 0 {
			continue
		}
		slices.SortFunc(cs, func(a, b rafs.Chunk) int { return int(int64(a.Ordinal) - int64(b.Ordinal)) })
		out = append(out, preheatBlob{digest: blobs[i].Digest, chunks: cs})
	}
	return out, nil
}

// openPreheat opens a docker:// reference through the registry it names
// and returns the image and where its blobs are for the node's reads.
// Other transports (local paths) are refused: a scheduler names images,
// not files on this node.
func (p *Preheater) openPreheat(ctx context.Context, ref string, tr http.RoundTripper) (*rimage.Image, registry.Ref, error) {
	if !strings.HasPrefix(ref, transport.Docker+"://") {
		return nil, registry.Ref{}, fmt.Errorf("image %q: only docker:// references can be preheated", ref)
	}
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		return nil, registry.Ref{}, err
	}
	reg := r.Name.Context().Registry
	opts := transport.Options{
		Insecure:  slices.Contains(p.cfg.PlainHTTP, reg.RegistryStr()),
		Keychain:  fileKeychain{path: p.cfg.DockerConfigFile},
		Transport: tr,
	}
	r, err = transport.Parse(ref, opts)
	if err != nil {
		return nil, registry.Ref{}, err
	}
	reg = r.Name.Context().Registry
	octx, cancel := context.WithTimeout(ctx, p.cfg.OpenTimeout)
	defer cancel()
	img, err := rimage.Open(octx, ref, rimage.Options{Transport: opts, MaxBootstrapSize: p.cfg.MaxBootstrapSize})
	if err != nil {
		return nil, registry.Ref{}, err
	}
	up := registry.Ref{Registry: reg.Scheme() + "://" + reg.RegistryStr(), Repo: r.Name.Context().RepositoryStr()}
	return img, up, nil
}

// preheat fetches the chunks req names into the node cache, counting in
// c. Chunks already cached are counted at once and cost no read. It
// returns when every chunk is in, one read failed, or ctx is done.
func (p *Preheater) preheat(ctx context.Context, req *preheatwire.Request, c *preheatCounts) error {
	// A transport of its own, so that its connections close with it.
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	img, up, err := p.openPreheat(ctx, req.Image, tr)
	if err != nil {
		return fmt.Errorf("open image: %w", err)
	}
	defer img.Close()
	blobs, err := preheatChunks(img.Bootstrap(), req.PrefetchOnly)
	if err != nil {
		return fmt.Errorf("list chunks: %w", err)
	}
	for _, b := range blobs {
		c.chunksTotal.Add(uint64(len(b.chunks)))
		for _, ch := range b.chunks {
			c.bytesTotal.Add(uint64(ch.CompressedSize))
		}
	}
	n := p.node
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.cfg.Parallel)
	for _, b := range blobs {
		for batch := range slices.Chunk(b.chunks, p.cfg.BatchChunks) {
			if gctx.Err() != nil {
				break
			}
			var miss []rafs.Chunk
			var held []uint32
			for _, ch := range batch {
				if !n.cache.Has(cache.KeyOf(ch)) {
					miss = append(miss, ch)
					continue
				}
				c.done(int(ch.CompressedSize))
				if n.hold.add(b.digest, ch.Ordinal, cache.KeyOf(ch)) {
					held = append(held, ch.Ordinal)
				}
			}
			if len(held) > 0 {
				n.router.Announce(b.digest, held)
			}
			if len(miss) == 0 {
				continue
			}
			g.Go(func() error {
				err := n.ReadChunks(gctx, up, b.digest, miss, func(i int, _ rafs.Chunk, _ []byte) error {
					c.done(int(miss[i].CompressedSize))
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
