package scheduler

import (
	"slices"
	"time"

	"damselfly/rafs"
)

// Refutations: what a "not found" answer does to a holder's word.
//
// A report with Missing chunks (within its assignment) clears them from
// the parent's holding, as before; it may also refute them for
// Config.RefuteDuration. While a chunk is refuted, the parent's
// announcements of it (Announce or AnnounceFull) are held back instead of
// recorded, so a peer that announces chunks it does not hold, and goes on
// announcing them, is named for them once per RefuteDuration, not to
// every requester. When the refutation ends (swept by Expire), the
// announcements held back are applied. A Drop removes chunks from what is
// held back.
//
// Honest peers answer "not found" too, for chunks they evicted before
// their Drop reached the scheduler; they send that Drop when they evict,
// and again when they find a requested chunk gone. So the first miss of a
// chunk within a refutation's life is excused when the peer owns up to
// it: its Drop came before the report (the chunk was no longer held), or
// comes after it (the chunk is un-refuted). An excused chunk's next
// announcement counts at once. A second miss of the same chunk before
// the refutation ends is not excused, whatever the peer says: a liar
// that drops what it is caught lying about is named twice per
// RefuteDuration, not at every announcement.
//
// Refutations live with the peer's record (a new session does not clear
// them) and are bounded by maxRefuted ordinals per peer; beyond that, a
// report still clears chunks but refutes no more.

// maxRefuted bounds the ordinals, refuted or held back, kept per peer.
const maxRefuted = 1 << 14

// refutation is what is kept about one blob of a peer.
type refutation struct {
	until time.Time
	ords  []uint32 // refuted chunks, sorted
	held  []uint32 // refuted chunks announced since, sorted
	// excused are chunks whose first miss was excused, sorted: their
	// next miss is refuted and stays so.
	excused []uint32
}

func (p *peer) refutedSize() int {
	n := 0
	for _, r := range p.refuted {
		n += len(r.ords) + len(r.held) + len(r.excused)
	}
	return n
}

// refute records that chunks of blob were found missing at p; dropped
// are those among them that p no longer held when the report came (its
// Drop came first).
func (s *State) refute(p *peer, blob rafs.Digest, chunks, dropped []uint32, now time.Time) {
	if len(chunks) == 0 {
		return
	}
	chunks = slices.Clone(chunks)
	slices.Sort(chunks)
	chunks = slices.Compact(chunks)
	r := p.refuted[blob]
	if p.refutedSize()+len(chunks) > maxRefuted {
		return
	}
	if r == nil {
		if p.refuted == nil {
			p.refuted = make(map[rafs.Digest]*refutation)
		}
		r = &refutation{}
		p.refuted[blob] = r
	}
	r.until = now.Add(s.cfg.RefuteDuration)
	dropped = slices.Clone(dropped)
	slices.Sort(dropped)
	var refuted, excused []uint32
	for _, c := range chunks {
		_, again := slices.BinarySearch(r.excused, c)
		_, owned := slices.BinarySearch(dropped, c)
		if !again && owned {
			excused = append(excused, c)
		} else {
			refuted = append(refuted, c)
		}
	}
	r.excused = union(r.excused, excused)
	r.ords = union(r.ords, refuted)
	r.held = minus(r.held, refuted)
}

// excuse un-refutes chunks p dropped that were refuted and not excused
// before, and forgets them from what is held back.
func (s *State) excuse(p *peer, blob rafs.Digest, chunks []uint32) {
	r := p.refuted[blob]
	if r == nil {
		return
	}
	c := slices.Clone(chunks)
	slices.Sort(c)
	c = slices.Compact(c)
	r.held = minus(r.held, c)
	var first []uint32
	for _, x := range c {
		_, refuted := slices.BinarySearch(r.ords, x)
		_, again := slices.BinarySearch(r.excused, x)
		if refuted && !again {
			first = append(first, x)
		}
	}
	if len(first) > 0 {
		r.ords = minus(r.ords, first)
		r.excused = union(r.excused, first)
	}
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
