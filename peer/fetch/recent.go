package fetch

import (
	"slices"
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
)

// Bounds of the memory of recent parents.
const (
	recentBlobs     = 256              // blobs remembered
	recentPerBlob   = 8                // parents remembered per blob
	recentMaxChunks = 1 << 16          // ordinals remembered per parent and blob
	recentTTL       = 10 * time.Minute // how long an answer is trusted
)

// recent remembers, per blob, the parents the Router named lately and the
// chunks it named them for, so that reads go on peer to peer while no
// scheduler answers. It is bounded in blobs, parents per blob and chunks
// per parent; the least recently learnt entries go first.
type recent struct {
	mu    sync.Mutex
	blobs map[rafs.Digest]*recentBlob
}

type recentBlob struct {
	at      time.Time
	parents []*recentParent // most recent first
}

type recentParent struct {
	info   lpeer.AddrInfo
	at     time.Time
	chunks map[uint32]struct{}
}

func newRecent() *recent {
	return &recent{blobs: make(map[rafs.Digest]*recentBlob)}
}

// learn records that p holds chunks of blob.
func (r *recent) learn(blob rafs.Digest, p lpeer.AddrInfo, chunks []uint32, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.blobs[blob]
	if b == nil {
		if len(r.blobs) >= recentBlobs {
			r.evictOldest()
		}
		b = &recentBlob{}
		r.blobs[blob] = b
	}
	b.at = now
	var rp *recentParent
	for i, x := range b.parents {
		if x.info.ID == p.ID {
			rp = x
			b.parents = append(b.parents[:i], b.parents[i+1:]...)
			break
		}
	}
	if rp == nil {
		rp = &recentParent{chunks: make(map[uint32]struct{})}
		if len(b.parents) >= recentPerBlob {
			b.parents = b.parents[:recentPerBlob-1]
		}
	}
	if len(p.Addrs) > 0 {
		rp.info = lpeer.AddrInfo{ID: p.ID, Addrs: append(rp.info.Addrs[:0:0], p.Addrs...)}
	} else {
		rp.info.ID = p.ID
	}
	rp.at = now
	for _, c := range chunks {
		if len(rp.chunks) >= recentMaxChunks {
			break
		}
		rp.chunks[c] = struct{}{}
	}
	b.parents = append([]*recentParent{rp}, b.parents...)
}

func (r *recent) evictOldest() {
	var oldest rafs.Digest
	var at time.Time
	first := true
	for d, b := range r.blobs {
		if first || b.at.Before(at) {
			oldest, at, first = d, b.at, false
		}
	}
	delete(r.blobs, oldest)
}

// parents returns up to n parents of blob learnt within recentTTL of now
// and not excluded by skip, ranked by rankRecent for chunks.
func (r *recent) parents(blob rafs.Digest, chunks []uint32, n int, now time.Time, skip func(lpeer.ID) bool) []lpeer.AddrInfo {
	ords := slices.Clone(chunks)
	slices.Sort(ords)
	ords = slices.Compact(ords)
	return rankRecent(r.known(blob, ords, now), ords, n, skip)
}

// known returns the parents learnt within recentTTL of now, as the
// planner takes them: those learnt for blob, most recently learnt
// first, each with the ordinals of chunks (ascending) it was named for;
// then those learnt for other blobs, most recently learnt first.
func (r *recent) known(blob rafs.Digest, chunks []uint32, now time.Time) []Known {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Known
	if b := r.blobs[blob]; b != nil {
		for _, p := range b.parents {
			if now.Sub(p.at) > recentTTL {
				continue
			}
			var holds []uint32
			for _, c := range chunks {
				if _, ok := p.chunks[c]; ok {
					holds = append(holds, c)
				}
			}
			out = append(out, Known{Info: p.info, SameBlob: true, Holds: holds})
		}
	}
	type other struct {
		info lpeer.AddrInfo
		at   time.Time
	}
	var others []other
	for d, b := range r.blobs {
		if d == blob {
			continue
		}
		for _, p := range b.parents {
			if now.Sub(p.at) <= recentTTL {
				others = append(others, other{p.info, p.at})
			}
		}
	}
	slices.SortStableFunc(others, func(a, b other) int { return b.at.Compare(a.at) })
	for _, o := range others {
		out = append(out, Known{Info: o.info})
	}
	return out
}

// RecentParents returns up to n parents the engine learnt recently for
// blob (those that hold more of chunks first; others learnt for other
// blobs fill the list), skipping those skip names. Safe for concurrent
// use.
func (e *Engine) RecentParents(blob rafs.Digest, chunks []uint32, n int, skip func(lpeer.ID) bool) []lpeer.AddrInfo {
	return e.recent.parents(blob, chunks, n, e.now(), skip)
}

// Learn records that p holds chunks of blob, as a Router said.
func (e *Engine) Learn(blob rafs.Digest, p lpeer.AddrInfo, chunks []uint32) {
	e.recent.learn(blob, p, chunks, e.now())
}
