package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"damselfly/peer/exchange"
	"damselfly/rafs"
	"damselfly/rafs/route"
)

// fetchParent fetches the chunks of reqs from parent p over the chunk
// exchange, one request per batch (decide cut them within the
// protocol's limits). Verified chunks are cached,
// announced and handed on; missing ones stay pending for the next round.
// A parent that sends bad bytes or breaks the protocol is avoided from
// then on; one that runs out of ParentTimeout or makes no progress is
// avoided for SlowAvoidDuration. With assigned (the Router named p), the
// outcome is reported. With hedge, a request that delivers nothing for
// HedgeDelay is hedged (hedge.go). Chunks p holds only under the
// other digest algorithm are fetched from the origin, which fails them
// at once if the read's description is wrong; p is not blamed.
func (e *Engine) fetchParent(ctx context.Context, g *group, p lpeer.AddrInfo, reqs [][]rafs.Chunk, assigned, hedge bool) {
	if len(p.Addrs) > 0 {
		e.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.TempAddrTTL)
	}
	start := time.Now()
	o := route.Outcome{Blob: g.blob, OK: true}
	cancelled := false // by this node: nothing to report about the parent
	// otherAlgo are chunks p holds under the same digest with the other
	// digest algorithm: the read described them wrongly. p is not at
	// fault and still holds what it announced, so they are neither
	// reported missing nor asked of another parent (which would answer
	// alike until FetchDeadline): the origin settles them at once.
	var otherAlgo []rafs.Chunk
	defer func() {
		if len(otherAlgo) > 0 && ctx.Err() == nil {
			e.fetchOrigin(ctx, g, otherAlgo, false)
		}
	}()
	for _, batch := range reqs {
		g.tr.parents.Add(1)
		pctx, cancel := context.WithTimeout(ctx, e.cfg.ParentTimeout)
		var hg *hedger
		if hedge && e.cfg.HedgeDelay > 0 {
			hg = e.startHedge(ctx, cancel, g, p.ID, batch)
		}
		res, err := exchange.FetchWatched(pctx, e.h, p.ID, g.blob, batch, func(c rafs.Chunk, stored []byte) error {
			e.keep(g, c, stored, SourcePeer, true) // stored is ours (exchange.Fetch)
			hg.progress()
			return nil
		}, hg.bytesFunc())
		won := hg.finish() // the hedge got every chunk first: the request was cancelled for it
		cancel()
		o.Bytes += res.Bytes
		otherAlgo = append(otherAlgo, res.OtherAlgo...)
		for _, c := range res.Missing {
			o.Missing = append(o.Missing, c.Ordinal)
		}
		if err == nil && len(res.Missing) == 0 {
			continue
		}
		o.OK = false
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, exchange.ErrBadChunk) || errors.Is(err, exchange.ErrProtocol):
			o.BadBytes = true
			switch {
			case len(res.Bad) > 0:
				o.BadChunk = res.Bad[0].Ordinal
			case len(res.Unanswered) > 0:
				o.BadChunk = res.Unanswered[0].Ordinal
			}
			// Avoided below, once the report is queued.
			e.m.BadPeer()
			e.log.Warn("peer sent bad bytes; avoiding it", "peer", p.ID, "blob", g.blob, "chunk", o.BadChunk, "err", err)
		case won:
			// Reported as failed even if the reads have gone meanwhile.
			e.log.Debug("peer was slower than the hedge", "peer", p.ID, "blob", g.blob)
		case ctx.Err() != nil:
			cancelled = true
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
			e.avoidSlow(p.ID)
			e.m.slowPeer()
			e.log.Warn("peer made no progress in time; avoiding it for a while", "peer", p.ID, "blob", g.blob,
				"for", e.cfg.SlowAvoidDuration, "err", err)
		default:
			e.log.Debug("fetch from peer failed", "peer", p.ID, "blob", g.blob, "err", err)
		}
		if !won {
			g.noteErr(fmt.Errorf("peer %s: %w", p.ID, err))
		}
		break // the rest would fail alike; the next round routes them again
	}
	o.Duration = time.Since(start)
	if assigned && !cancelled {
		e.router.Report(p.ID, o)
	}
	if o.BadBytes {
		// After the report: a round that meets the avoided peer gives its
		// new assignment back with a report of its own, and the scheduler
		// matches a report without a chunk to the oldest assignment to
		// that peer, which could be this one; this report, which names
		// the bad chunk, would then match none and its accusation be
		// lost (seen in TestCorruptPeerIsBanned).
		e.AvoidBad(p.ID)
	}
}
