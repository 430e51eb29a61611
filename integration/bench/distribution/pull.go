package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	regclient "damselfly/rafs/registry"
)

// unit is one request of a pull: adjacent chunks of one blob.
type unit struct {
	blob   rafs.Digest
	chunks []rafs.Chunk
	bytes  int // stored bytes
}

// units splits every blob of img into requests of up to batch chunks, in
// blob and offset order: the order a reader of the whole image asks in.
func units(img *image, batch int) []unit {
	var out []unit
	for _, b := range img.blobs {
		for i := 0; i < len(b.chunks); i += batch {
			u := unit{blob: b.blob.Digest, chunks: b.chunks[i:min(i+batch, len(b.chunks))]}
			for _, c := range u.chunks {
				u.bytes += int(c.CompressedSize)
			}
			out = append(out, u)
		}
	}
	return out
}

// rotate returns us starting at unit k (mod len(us)), wrapping around.
func rotate(us []unit, k int) []unit {
	if len(us) == 0 {
		return us
	}
	k %= len(us)
	return append(us[k:len(us):len(us)], us[:k]...)
}

// downlink limits what a node receives to its link rate: a token bucket
// that starts empty, like an idle NIC, paid before each request. Origin
// bytes also cross the node's shaped link; peer bytes cross no shaper of
// the node's own, so without the bucket a node could download from its
// peers faster than its link allows. nil means unshaped.
func downlink(bytesPerSec float64, us []unit) *rate.Limiter {
	if bytesPerSec <= 0 {
		return nil
	}
	burst := 1
	for _, u := range us {
		burst = max(burst, u.bytes)
	}
	lim := rate.NewLimiter(rate.Limit(bytesPerSec), burst)
	lim.AllowN(time.Now(), burst)
	return lim
}

// pull reads every unit through the batch endpoint at proxyURL with
// readers requests in flight, each verified by the chunkapi.Client, and
// returns the stored bytes received.
func pull(ctx context.Context, proxyURL, repo string, us []unit, readers int, down *rate.Limiter) (int64, error) {
	base, tr, err := chunkapi.Endpoint(proxyURL, &http.Transport{MaxIdleConnsPerHost: readers, DisableCompression: true})
	if err != nil {
		return 0, err
	}
	defer tr.CloseIdleConnections()
	cc := chunkapi.NewClient(base, &http.Client{Transport: tr})
	var next atomic.Int64
	var got atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range readers {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(us) {
					return nil
				}
				u := us[i]
				if down != nil {
					if err := down.WaitN(gctx, u.bytes); err != nil {
						return err
					}
				}
				err := cc.ReadChunks(gctx, regclient.Ref{Repo: repo}, u.blob, u.chunks, func(_ int, _ rafs.Chunk, stored []byte) error {
					got.Add(int64(len(stored)))
					return nil
				})
				if err != nil {
					return fmt.Errorf("blob %s, chunks %d..%d: %w", u.blob, u.chunks[0].Ordinal, u.chunks[len(u.chunks)-1].Ordinal, err)
				}
			}
		})
	}
	err = g.Wait()
	return got.Load(), err
}
