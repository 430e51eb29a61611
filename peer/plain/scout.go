package plain

import (
	"context"
	"time"

	"damselfly/rafs/registry"
)

// The scout of a live pull. Every node reads a blob's pieces in order
// (its client wants them so), so when several pull at once the node that
// gets ahead is the only one asking about the pieces beyond everyone
// else: it takes their origin turns one after the other, and its uplink
// then has to carry every other node's copy of most of the blob
// (measured: one of four nodes took 86 of 160 turns, 131 with deeper
// prefetch). The scout asks about the pieces at the frontier of what
// this node knows, the first unknown after the furthest known, a window
// at a time, as soon as the pull starts, so that every node pulling the
// blob competes for the turns there, and the scheduler's bound on the
// turns a peer holds at once (origin_turns_per_peer) hands them round.
// What the scout resolves it fetches into the node cache, from the
// origin (its turns) or from the parents the Router names, as the reads
// would.

// scoutWindow is how many pieces the scout asks about at a time, and
// scoutIdle how long it goes on with no read through the pull (a client
// that went away: its retry joins the pull again).
const (
	scoutWindow = 4
	scoutIdle   = 30 * time.Second
)

// scoutLife bounds a scout: long enough to pull the blob at 1 MiB/s,
// at least the fetch deadline.
func (s *Source) scoutLife(lv *live) time.Duration {
	return max(time.Duration(lv.t.Size>>20)*time.Second, s.deadline)
}

// frontier returns the first piece whose digest is unknown after the
// furthest known one (or the first unknown at all when every piece after
// it is known), and false when every digest is known.
func (lv *live) frontier() (int, bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	last := -1
	for i, d := range lv.digests {
		if d != ([32]byte{}) {
			last = i
		}
	}
	for i := last + 1; i < len(lv.digests); i++ {
		if lv.digests[i] == ([32]byte{}) {
			return i, true
		}
	}
	for i, d := range lv.digests {
		if d == ([32]byte{}) {
			return i, true
		}
	}
	return 0, false
}

// scout resolves lv's windows at its frontier until every digest is
// known, the pull ends, or a window cannot be resolved.
func (s *Source) scout(ctx context.Context, up registry.Ref, lv *live) {
	lv.read.Store(time.Now().UnixNano())
	for ctx.Err() == nil {
		if time.Since(time.Unix(0, lv.read.Load())) > scoutIdle {
			return
		}
		first, ok := lv.frontier()
		if !ok {
			return
		}
		last := min(first+scoutWindow, lv.t.Count())
		if err := s.resolve(ctx, up, lv, first, last); err != nil {
			return
		}
	}
}
