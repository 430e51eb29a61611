package peer

import (
	"slices"
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
)

// Bounds of the memory of recent parents.
const (
	recentBlobs      = 256              // blobs remembered
	recentPerBlob    = 8                // parents remembered per blob
	recentMaxChunks  = 1 << 16          // ordinals remembered per parent and blob
	recentTTL        = 10 * time.Minute // how long an answer is trusted
	recentFallbackTo = 3                // parents asked per round without a Router
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
// and not excluded by skip, those that hold more of chunks first. When
// the blob has fewer, parents learnt for other blobs fill the list, most
// recently learnt first: with no scheduler to ask, a peer that served
// this node one layer of an image is the likeliest holder of its other
// layers, and one that holds none of the chunks says so in a round trip.
func (r *recent) parents(blob rafs.Digest, chunks []uint32, n int, now time.Time, skip func(lpeer.ID) bool) []lpeer.AddrInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	type cand struct {
		info  lpeer.AddrInfo
		cover int
		at    time.Time
	}
	var cands []cand
	if b := r.blobs[blob]; b != nil {
		for _, p := range b.parents {
			if now.Sub(p.at) > recentTTL || skip(p.info.ID) {
				continue
			}
			cover := 0
			for _, c := range chunks {
				if _, ok := p.chunks[c]; ok {
					cover++
				}
			}
			cands = append(cands, cand{p.info, cover, p.at})
		}
		// Stable insertion sort by coverage: the list is at most
		// recentPerBlob.
		for i := 1; i < len(cands); i++ {
			for j := i; j > 0 && cands[j].cover > cands[j-1].cover; j-- {
				cands[j], cands[j-1] = cands[j-1], cands[j]
			}
		}
	}
	out := make([]lpeer.AddrInfo, 0, n)
	seen := make(map[lpeer.ID]bool, n)
	for _, c := range cands {
		if len(out) == n {
			return out
		}
		out = append(out, c.info)
		seen[c.info.ID] = true
	}
	var others []cand
	for d, b := range r.blobs {
		if d == blob {
			continue
		}
		for _, p := range b.parents {
			if !seen[p.info.ID] && now.Sub(p.at) <= recentTTL && !skip(p.info.ID) {
				others = append(others, cand{info: p.info, at: p.at})
			}
		}
	}
	slices.SortStableFunc(others, func(a, b cand) int { return b.at.Compare(a.at) })
	for _, c := range others {
		if len(out) == n {
			break
		}
		if !seen[c.info.ID] {
			out = append(out, c.info)
			seen[c.info.ID] = true
		}
	}
	return out
}
