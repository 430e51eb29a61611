package scheduler

import (
	"slices"
	"time"

	"damselfly/rafs"
)

// Refutations: what a "not found" answer does to a holder's word.
//
// A report with Missing chunks (within its assignment) clears them from
// the parent's holding, as before; it also refutes them for
// Config.RefuteDuration. While a chunk is refuted, the parent's
// announcements of it (Announce or AnnounceFull) are held back instead of
// recorded, so a peer that announces chunks it does not hold, and goes on
// announcing them, is named for them once per RefuteDuration, not to
// every requester. When the refutation ends (swept by Expire), the
// announcements held back are applied: an honest peer that had evicted a
// chunk without a Drop yet and fetched it again loses nothing but a
// few minutes of being named for it. A Drop removes chunks from what is
// held back. Refutations live with the peer's record (a new session
// does not clear them) and are bounded by maxRefuted ordinals per peer;
// beyond that, a report still clears chunks but refutes no more.

// maxRefuted bounds the ordinals, refuted or held back, kept per peer.
const maxRefuted = 1 << 14

// refutation is what is kept about one blob of a peer.
type refutation struct {
	until time.Time
	ords  []uint32 // refuted chunks, sorted
	held  []uint32 // refuted chunks announced since, sorted
}

func (p *peer) refutedSize() int {
	n := 0
	for _, r := range p.refuted {
		n += len(r.ords) + len(r.held)
	}
	return n
}

// refute records that chunks of blob were found missing at p.
func (s *State) refute(p *peer, blob rafs.Digest, chunks []uint32, now time.Time) {
	if len(chunks) == 0 {
		return
	}
	chunks = slices.Clone(chunks)
	slices.Sort(chunks)
	chunks = slices.Compact(chunks)
	r := p.refuted[blob]
	if r == nil {
		if p.refutedSize()+len(chunks) > maxRefuted {
			return
		}
		if p.refuted == nil {
			p.refuted = make(map[rafs.Digest]*refutation)
		}
		r = &refutation{}
		p.refuted[blob] = r
	} else if p.refutedSize()+len(chunks) > maxRefuted {
		return
	}
	r.until = now.Add(s.cfg.RefuteDuration)
	r.ords = union(r.ords, chunks)
	r.held = minus(r.held, chunks)
}

// holdBack splits chunks (an announcement by p) into those to record
// now and those refuted, which it keeps to apply when the refutation
// ends. It does not modify chunks.
func (s *State) holdBack(p *peer, blob rafs.Digest, chunks []uint32, now time.Time) []uint32 {
	r := p.refuted[blob]
	if r == nil {
		return chunks
	}
	var keep, back []uint32
	for _, c := range chunks {
		if _, ok := slices.BinarySearch(r.ords, c); ok {
			back = append(back, c)
		} else {
			keep = append(keep, c)
		}
	}
	if len(back) > 0 {
		slices.Sort(back)
		back = slices.Compact(back)
		if room := maxRefuted - p.refutedSize(); room < len(back) {
			back = back[:max(room, 0)]
		}
		r.held = union(r.held, back)
	}
	return keep
}

// holdBackFull is holdBack for a full announcement: it returns held (a
// copy, if it changed) without the refuted chunks, and what is held back
// becomes exactly the refuted chunks that held has.
func (s *State) holdBackFull(p *peer, blob rafs.Digest, held Bitset) Bitset {
	r := p.refuted[blob]
	if r == nil {
		return held
	}
	r.held = r.held[:0]
	copied := false
	for _, c := range r.ords {
		if !held.Has(c) {
			continue
		}
		if !copied {
			held = slices.Clone(held)
			copied = true
		}
		held[c/64] &^= 1 << (c % 64)
		r.held = append(r.held, c)
	}
	return held.trim()
}

// unholdBack forgets chunks dropped by p from what is held back.
func (s *State) unholdBack(p *peer, blob rafs.Digest, chunks []uint32) {
	if r := p.refuted[blob]; r != nil && len(r.held) > 0 {
		c := slices.Clone(chunks)
		slices.Sort(c)
		r.held = minus(r.held, c)
	}
}

// sweepRefuted ends p's refutations that ran out at now and records the
// announcements they held back.
func (s *State) sweepRefuted(p *peer, now time.Time) {
	for blob, r := range p.refuted {
		if now.Before(r.until) {
			continue
		}
		delete(p.refuted, blob)
		if len(r.held) == 0 || s.banned(p, now) {
			continue
		}
		b := s.blob(blob, true)
		high := r.held[len(r.held)-1] + 1
		h, err := s.holding(p, b, words(high))
		if err != nil {
			s.forgetIfEmpty(b)
			continue
		}
		row := b.row(h)
		for _, c := range r.held {
			if !row.Has(c) {
				row[c/64] |= 1 << (c % 64)
				h.n++
			}
		}
		s.resolveOrigin(b, p, r.held, nil)
	}
	if len(p.refuted) == 0 {
		p.refuted = nil
	}
}

// union returns the sorted union of sorted a and b.
func union(a, b []uint32) []uint32 {
	out := make([]uint32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// minus returns sorted a without the elements of sorted b.
func minus(a, b []uint32) []uint32 {
	out := a[:0]
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j < len(b) && b[j] == x {
			continue
		}
		out = append(out, x)
	}
	return out
}
