package fetch

import (
	"slices"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
)

// The per-round decision. A round of a batch's fetch (round.go) or a
// hedge of a slow parent (hedge.go) gathers what it knows into an Input,
// and decide says what to fetch from whom; the executors do the I/O. The
// decision has no I/O, clock or goroutines: time comes in as Input.Now.

// Input is what one decision knows.
type Input struct {
	// Self is this node: never a parent of its own.
	Self lpeer.ID
	// Route is the Router's answer for Pending; nil when none came
	// (the router is down or slow).
	Route *route.Route
	// Pending are the chunks still to fetch, ascending by ordinal,
	// without duplicates.
	Pending []rafs.Chunk
	// Avoid is until when each peer is not asked (it sent bad bytes, or
	// stalled); a time before Now no longer counts.
	Avoid map[lpeer.ID]time.Time
	Now   time.Time
	// Recent are the parents learnt recently, most recent first (those
	// learnt for this blob, then others): asked, best first, when there
	// is no Route, and for the chunks of parents the Route names but
	// this node avoids.
	Recent []Known
	// Hedge marks a hedge of Slow's request for Pending: Slow is not
	// asked; chunks of avoided parents are given back, not planned
	// elsewhere; and without a Route one recent parent is asked and the
	// origin left alone (Slow is still sending).
	Hedge bool
	Slow  lpeer.ID
	// Limits bound one request to a parent.
	Limits Limits
}

// Known is a parent learnt recently.
type Known struct {
	Info lpeer.AddrInfo
	// SameBlob: it was learnt for this blob, holding Holds (ordinals of
	// Pending, ascending). Otherwise it was learnt for another blob.
	SameBlob bool
	Holds    []uint32
}

// Limits bound one request to a parent: chunks, and stored bytes (a
// chunk counted at the larger of its two sizes); a chunk bigger than
// MaxBytes goes alone.
type Limits struct {
	MaxChunks int
	MaxBytes  int64
}

// Plan is what to fetch from whom. Each pending chunk is in at most one
// of Parents, Fallback, Origin and Wait.
type Plan struct {
	// Parents are the Router's assignments, each in requests within
	// Limits, in the Route's order (best first).
	Parents []Assignment
	// GiveBack are parents the Route named that this node avoids: their
	// assignment is ended with an empty report.
	GiveBack []lpeer.ID
	// Fallback are chunks to ask recent parents for, one after the
	// other, then the origin.
	Fallback Fallback
	// Origin are this node's origin turns for pending chunks.
	Origin []rafs.Chunk
	// Stray are origin turns granted for chunks no longer pending: they
	// came another way meanwhile (the executor gives back those whose
	// chunk is kept).
	Stray []uint32
	// Wait are pending chunks other peers are fetching: ask again after
	// RetryAfter, the shortest the Route gave. Waited is whether the
	// Route said to wait at all.
	Wait       []uint32
	RetryAfter time.Duration
	Waited     bool
}

// Assignment is a parent the Router named and the pending chunks to ask
// it for.
type Assignment struct {
	Named   route.Parent // as the Route named it
	Batches [][]rafs.Chunk
}

// Fallback is a list of parents to ask in turn, each for what is still
// pending of Chunks, and whether to go to the origin for the rest.
type Fallback struct {
	Chunks  []uint32 // ascending
	Parents []lpeer.AddrInfo
	Origin  bool
}

// Bounds of the fallback without a Router.
const (
	recentFallbackTo = 3 // recent parents asked per round
	recentHedgeTo    = 1 // recent parents asked by a hedge
)

// decide is the per-round decision.
func decide(in Input) Plan {
	var p Plan
	if len(in.Pending) == 0 {
		return p
	}
	pending := make(map[uint32]rafs.Chunk, len(in.Pending))
	for _, c := range in.Pending {
		pending[c.Ordinal] = c
	}
	skip := func(id lpeer.ID) bool {
		if id == in.Self || (in.Hedge && id == in.Slow) {
			return true
		}
		until, ok := in.Avoid[id]
		return ok && !in.Now.After(until)
	}
	if in.Route == nil {
		n := recentFallbackTo
		if in.Hedge {
			n = recentHedgeTo
		}
		chunks := ordinalsOf(in.Pending)
		p.Fallback = Fallback{Chunks: chunks, Origin: !in.Hedge, Parents: rankRecent(in.Recent, chunks, n, skip)}
		return p
	}
	taken := make(map[uint32]bool, len(in.Pending))
	take := func(ords []uint32) []rafs.Chunk {
		var out []rafs.Chunk
		for _, o := range ords {
			if c, ok := pending[o]; ok && !taken[o] {
				taken[o] = true
				out = append(out, c)
			}
		}
		slices.SortFunc(out, func(a, b rafs.Chunk) int { return cmpOrdinal(a, b) })
		return out
	}
	var elsewhere []uint32
	for _, rp := range in.Route.Parents {
		if rp.Info.ID == in.Self || len(rp.Chunks) == 0 {
			continue
		}
		if skip(rp.Info.ID) {
			// The Router may name a peer this node avoids all the same:
			// it has not taken the report yet, lost it with a restart,
			// or (for a stall, which it cannot know for sure) only
			// lowered its health while it is the only holder. Waiting
			// for it to change its answer could take until
			// FetchDeadline: end the assignment, and (unless hedging,
			// when the slow parent is still sending) get the chunks
			// from recent parents or the origin now.
			p.GiveBack = append(p.GiveBack, rp.Info.ID)
			if !in.Hedge {
				for _, c := range take(rp.Chunks) {
					elsewhere = append(elsewhere, c.Ordinal)
				}
			}
			continue
		}
		if cs := take(rp.Chunks); len(cs) > 0 {
			p.Parents = append(p.Parents, Assignment{Named: rp, Batches: batches(cs, in.Limits)})
		}
	}
	if len(elsewhere) > 0 {
		slices.Sort(elsewhere)
		p.Fallback = Fallback{Chunks: elsewhere, Origin: true,
			Parents: rankRecent(in.Recent, elsewhere, recentFallbackTo, skip)}
	}
	for _, o := range in.Route.Origin {
		if _, ok := pending[o]; !ok {
			p.Stray = append(p.Stray, o)
		}
	}
	p.Origin = take(in.Route.Origin)
	if in.Hedge {
		return p // a hedge asks again later by itself
	}
	var wait []uint32
	for _, w := range in.Route.Wait {
		if !p.Waited || w.RetryAfter < p.RetryAfter {
			p.RetryAfter = w.RetryAfter
		}
		p.Waited = true
		wait = append(wait, w.Chunks...)
	}
	for _, c := range take(wait) {
		p.Wait = append(p.Wait, c.Ordinal)
	}
	return p
}

// rankRecent returns up to n of known not skipped: those learnt for the
// blob first, those that hold more of chunks (ascending) before others
// (the most recent first among equals), then those learnt for other
// blobs, most recent first: with no scheduler to ask, a peer that served
// this node one layer of an image is the likeliest holder of its other
// layers, and one that holds none of the chunks says so in a round trip.
func rankRecent(known []Known, chunks []uint32, n int, skip func(lpeer.ID) bool) []lpeer.AddrInfo {
	type cand struct {
		info  lpeer.AddrInfo
		cover int
	}
	var same []cand
	for _, k := range known {
		if k.SameBlob && !skip(k.Info.ID) {
			same = append(same, cand{k.Info, coverage(k.Holds, chunks)})
		}
	}
	slices.SortStableFunc(same, func(a, b cand) int { return b.cover - a.cover })
	out := make([]lpeer.AddrInfo, 0, n)
	seen := make(map[lpeer.ID]bool, n)
	for _, c := range same {
		if len(out) == n {
			return out
		}
		out = append(out, c.info)
		seen[c.info.ID] = true
	}
	for _, k := range known {
		if len(out) == n {
			break
		}
		if !k.SameBlob && !seen[k.Info.ID] && !skip(k.Info.ID) {
			out = append(out, k.Info)
			seen[k.Info.ID] = true
		}
	}
	return out
}

// coverage counts the ordinals two ascending lists share.
func coverage(a, b []uint32) int {
	n := 0
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] < b[0]:
			a = a[1:]
		case a[0] > b[0]:
			b = b[1:]
		default:
			n++
			a, b = a[1:], b[1:]
		}
	}
	return n
}

// batches cuts cs into requests within l.
func batches(cs []rafs.Chunk, l Limits) [][]rafs.Chunk {
	var out [][]rafs.Chunk
	var cur []rafs.Chunk
	var bytes int64
	for _, c := range cs {
		sz := int64(max(c.CompressedSize, c.Size))
		if len(cur) > 0 && (len(cur) == l.MaxChunks || bytes+sz > l.MaxBytes) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, c)
		bytes += sz
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func cmpOrdinal(a, b rafs.Chunk) int { return int(int64(a.Ordinal) - int64(b.Ordinal)) }

func ordinalsOf(cs []rafs.Chunk) []uint32 {
	out := make([]uint32, len(cs))
	for i, c := range cs {
		out[i] = c.Ordinal
	}
	return out
}
