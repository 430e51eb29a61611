package server

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/scheduler"
)

// Held routes (RouteWait). A peer told to wait for chunks would otherwise
// ask again after the wait's RetryAfter, a poll: a chunk announced just
// after the answer sits unused until then, and while a whole cluster
// waits for one origin fetch that delay is paid on every hop of the
// chunk's way through the cluster. A RouteWait whose answer is all waits
// is instead held with a watch on its chunks; an Announce, AnnounceFull
// or Abandon of any of them fires the watch, and the route is answered
// afresh at once.

// Bounds of held routes. A RouteWait past them is answered at once, as a
// Route: waiting is an optimisation, never a reason to refuse.
const (
	maxHeldPerPeer = 64
	// maxHeldTotal is per server; each held route is one stream and a
	// few hundred bytes.
	maxHeldTotal = 16384
)

// watch is one held route's interest: chunks of a blob, ascending.
type watch struct {
	chunks []uint32
	fired  chan struct{} // closed by fire
	done   bool          // fired or removed; under watches.mu
}

// watches are the held routes, by blob.
type watches struct {
	mu      sync.Mutex
	byBlob  map[rafs.Digest]map[*watch]struct{}
	perPeer map[peer.ID]int
	n       int
}

func newWatches() *watches {
	return &watches{byBlob: map[rafs.Digest]map[*watch]struct{}{}, perPeer: map[peer.ID]int{}}
}

// add starts watching chunks (ascending) of blob for p, or returns nil
// when p or the server holds as many routes as they may.
func (ws *watches) add(p peer.ID, blob rafs.Digest, chunks []uint32) *watch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n >= maxHeldTotal || ws.perPeer[p] >= maxHeldPerPeer {
		return nil
	}
	w := &watch{chunks: chunks, fired: make(chan struct{})}
	m := ws.byBlob[blob]
	if m == nil {
		m = map[*watch]struct{}{}
		ws.byBlob[blob] = m
	}
	m[w] = struct{}{}
	ws.perPeer[p]++
	ws.n++
	return w
}

// len returns how many routes are held now.
func (ws *watches) len() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.n
}

// remove stops w, which add returned for p and blob.
func (ws *watches) remove(p peer.ID, blob rafs.Digest, w *watch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if m := ws.byBlob[blob]; m != nil {
		delete(m, w)
		if len(m) == 0 {
			delete(ws.byBlob, blob)
		}
	}
	w.done = true
	if ws.perPeer[p] <= 1 {
		delete(ws.perPeer, p)
	} else {
		ws.perPeer[p]--
	}
	ws.n--
}

// fire wakes the watches of blob that share a chunk with chunks
// (ascending), or, if set is not nil, that have a chunk in set.
func (ws *watches) fire(blob rafs.Digest, chunks []uint32, set scheduler.Bitset) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.byBlob[blob] {
		if w.done {
			continue
		}
		if (set != nil && anyIn(w.chunks, set)) || (set == nil && intersect(w.chunks, chunks)) {
			w.done = true
			close(w.fired)
		}
	}
}

// intersect reports whether the ascending lists a and b share a value.
func intersect(a, b []uint32) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			return true
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return false
}

func anyIn(chunks []uint32, set scheduler.Bitset) bool {
	for _, c := range chunks {
		if set.Has(c) {
			return true
		}
	}
	return false
}
