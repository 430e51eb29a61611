package scheduler

import (
	"time"

	"damselfly/rafs"
)

// A requester's tree waits (tree.go): when it was first told to wait for
// each chunk, so that a wait that went on past TreeStarveAfter ends with
// a full parent. They are kept per blob as a list ascending by chunk, so
// that a query's chunks, ascending too, are matched against them in one
// merge, and a query on a blob with no waits costs one map lookup.

// chunkWait is when a requester was first told to wait for chunk.
type chunkWait struct {
	chunk uint32
	since int64 // Unix ns
}

// forgetWaits removes chunks (ascending) from ws.
func forgetWaits(ws []chunkWait, chunks []uint32) []chunkWait {
	if len(ws) == 0 || len(chunks) == 0 || chunks[len(chunks)-1] < ws[0].chunk || chunks[0] > ws[len(ws)-1].chunk {
		return ws
	}
	out, j := ws[:0], 0
	for _, w := range ws {
		for j < len(chunks) && chunks[j] < w.chunk {
			j++
		}
		if j < len(chunks) && chunks[j] == w.chunk {
			continue
		}
		out = append(out, w)
	}
	clear(ws[len(out):])
	return out
}

// setWaits makes ws r's waits for blob, keeping r.nwaits.
func (r *peer) setWaits(blob rafs.Digest, old, ws []chunkWait) {
	r.nwaits += len(ws) - len(old)
	if len(ws) == 0 {
		delete(r.waits, blob)
	} else {
		r.waits[blob] = ws
	}
}

// noteWaits records, under the write lock, when r started waiting for
// the chunks of blob in tw (ascending), and forgets the waits for chunks
// r was given a parent or an origin turn for. At most maxWaitsPerPeer
// waits are kept; when they would not fit, waits long past are
// forgotten first.
func (s *State) noteWaits(r *peer, blob rafs.Digest, ans *Answer, tw []uint32, now time.Time) {
	if old := r.waits[blob]; len(old) > 0 {
		ws := old
		for _, p := range ans.Parents {
			ws = forgetWaits(ws, p.Chunks)
		}
		ws = forgetWaits(ws, ans.Origin)
		r.setWaits(blob, old, ws)
	}
	if len(tw) == 0 {
		if r.nwaits == 0 {
			r.waits = nil
		}
		return
	}
	nowNs := now.UnixNano()
	if r.waits == nil {
		r.waits = map[rafs.Digest][]chunkWait{}
	}
	if long := 4 * s.cfg.TreeStarveAfter.Nanoseconds(); r.nwaits+len(tw) > maxWaitsPerPeer && nowNs-r.waitsFrom > long {
		// Forget waits long past: their chunks were surely served.
		from := nowNs
		for d, old := range r.waits {
			ws := old[:0]
			for _, w := range old {
				if nowNs-w.since <= long {
					ws = append(ws, w)
					from = min(from, w.since)
				}
			}
			clear(old[len(ws):])
			r.setWaits(d, old, ws)
		}
		r.waitsFrom = from
	}
	// Add the chunks of tw not waited for yet, in order, while there is
	// room, merging from the back.
	ws := r.waits[blob]
	add, lim := 0, 0
	for i, j := 0, 0; i < len(tw) && r.nwaits+add < maxWaitsPerPeer; i++ {
		for j < len(ws) && ws[j].chunk < tw[i] {
			j++
		}
		if j == len(ws) || ws[j].chunk != tw[i] {
			add++
		}
		lim = i + 1
	}
	if add == 0 {
		return
	}
	if r.nwaits == 0 {
		r.waitsFrom = nowNs
	}
	r.waitsFrom = min(r.waitsFrom, nowNs)
	old := ws
	ws = append(ws, make([]chunkWait, add)...)
	i, o := len(old)-1, len(ws)-1
	for t := lim - 1; t >= 0; {
		switch c := tw[t]; {
		case i >= 0 && ws[i].chunk > c:
			ws[o] = ws[i]
			i--
			o--
		case i >= 0 && ws[i].chunk == c:
			t--
		default:
			ws[o] = chunkWait{chunk: c, since: nowNs}
			o--
			t--
		}
	}
	r.setWaits(blob, old, ws)
}
