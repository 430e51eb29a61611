package scheduler

import (
	"fmt"
	"math/bits"
	"time"

	"damselfly/rafs"
)

// Announce records that peerID now holds chunks of blob, in addition to
// what it announced before. It returns the peers that were waiting for
// any of these chunks to come from origin (sorted, without peerID), so
// the daemon can tell them to ask again now rather than at their retry
// time. Banned peers get ErrBanned; ordinals at or above
// Config.MaxChunksPerBlob, ErrInvalid; going over the peer's memory
// budget or that of all peers (Config.MaxHoldingBytesPerPeer,
// Config.MaxHoldingBytes), ErrLimit, with nothing recorded.
func (s *State) Announce(peerID string, blob rafs.Digest, chunks []uint32, now time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.announcer(peerID, blob, now)
	if err != nil {
		return nil, err
	}
	high := uint32(0)
	for _, c := range chunks {
		if c >= s.cfg.MaxChunksPerBlob {
			return nil, fmt.Errorf("announce %s by %q: chunk %d not below %d: %w", blob, peerID, c, s.cfg.MaxChunksPerBlob, ErrInvalid)
		}
		high = max(high, c+1)
	}
	claimed := chunks
	if chunks = s.holdBack(p, blob, chunks, now); len(chunks) == 0 {
		// Held back, the chunks are not recorded as held; but the
		// peer's own fetch of them has ended, so a peer waiting for it
		// must not wait out OriginTimeout: the next one to ask gets
		// the turn. Other peers' turns go on: nobody holds the chunks.
		if b := s.blob(blob, false); b != nil {
			return s.endTurns(p, b, claimed), nil
		}
		return nil, nil
	}
	heldBack := notKept(claimed, chunks)
	high = 0
	for _, c := range chunks {
		high = max(high, c+1)
	}
	b := s.blob(blob, true)
	h, err := s.holding(p, b, words(high))
	if err != nil {
		s.forgetIfEmpty(b)
		return nil, fmt.Errorf("announce %s by %q: %w", blob, peerID, err)
	}
	row := b.row(h)
	for _, c := range chunks {
		if !row.Has(c) {
			row[c/64] |= 1 << (c % 64)
			h.n++
		}
	}
	woken := s.resolveOrigin(b, p, chunks, nil)
	if len(heldBack) > 0 {
		woken = wakeList(append(woken, s.endTurns(p, b, heldBack)...), p.id)
	}
	return woken, nil
}

// notKept returns the chunks of all that are not in kept, a subset of
// all in the same order.
func notKept(all, kept []uint32) []uint32 {
	if len(kept) == len(all) {
		return nil
	}
	in := make(map[uint32]struct{}, len(kept))
	for _, c := range kept {
		in[c] = struct{}{}
	}
	var out []uint32
	for _, c := range all {
		if _, ok := in[c]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// AnnounceFull replaces everything peerID holds of blob with held, as a
// peer does after (re)registering. An empty set drops the holding. The
// State copies held. Errors are as for Announce.
func (s *State) AnnounceFull(peerID string, blob rafs.Digest, held Bitset, now time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.announcer(peerID, blob, now)
	if err != nil {
		return nil, err
	}
	held = held.trim()
	if len(held) > 0 {
		held = s.holdBackFull(p, blob, held)
	}
	if len(held) > 0 {
		top := uint64(len(held)-1)*64 + 63 - uint64(bits.LeadingZeros64(held[len(held)-1]))
		if top >= uint64(s.cfg.MaxChunksPerBlob) {
			return nil, fmt.Errorf("announce %s by %q: chunk %d not below %d: %w", blob, peerID, top, s.cfg.MaxChunksPerBlob, ErrInvalid)
		}
	}
	b := s.blob(blob, len(held) > 0)
	if b == nil {
		return nil, nil
	}
	if len(held) == 0 {
		if i, ok := p.holdings[b]; ok {
			s.removeHolder(b, int(i))
			s.forgetIfEmpty(b)
		}
		return nil, nil
	}
	h, err := s.holding(p, b, len(held))
	if err != nil {
		s.forgetIfEmpty(b)
		return nil, fmt.Errorf("announce %s by %q: %w", blob, peerID, err)
	}
	if int(h.len) > len(held) { // shrink to the new extent
		s.charge(p, -8*int64(int(h.len)-len(held)))
		b.resize(h, len(held))
		b.maybeCompact()
	}
	row := b.row(h)
	copy(row, held)
	h.n = int32(held.Count())
	return s.resolveOrigin(b, p, nil, row), nil
}

// Drop records that peerID no longer holds chunks of blob (evicted). An
// origin turn peerID holds for one of them ends too: it fetched the chunk
// and lost it, its announcement cancelled by the drop before either was
// sent (a peer sends only the net change), or gave up on it. Either way
// it will not announce the chunk, and the peers waiting for it would
// wait until OriginTimeout. Drop returns those waiters, to be told to
// ask again.
func (s *State) Drop(peerID string, blob rafs.Digest, chunks []uint32, now time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.member(peerID, now)
	if err != nil {
		return nil, fmt.Errorf("drop %s: %w", blob, err)
	}
	var woken []string
	if b := s.blobs[blob]; b != nil {
		s.clearChunks(p, b, chunks)
		woken = s.endTurns(p, b, chunks)
		s.forgetIfEmpty(b)
	}
	s.excuse(p, blob, chunks)
	return woken, nil
}

// announcer returns the live, unbanned peer id.
func (s *State) announcer(id string, blob rafs.Digest, now time.Time) (*peer, error) {
	p, err := s.member(id, now)
	if err != nil {
		return nil, fmt.Errorf("announce %s: %w", blob, err)
	}
	if s.banned(p, now) {
		return nil, fmt.Errorf("announce %s by %q: %w until %s", blob, id, ErrBanned, time.Unix(0, s.hotOf(p).bannedUntil).UTC().Format(time.RFC3339))
	}
	return p, nil
}

// holding returns p's holding of b with room for n words, creating or
// growing it within p's memory budget. The pointer is valid until the
// next change of b's holders.
func (s *State) holding(p *peer, b *blobState, n int) (*holder, error) {
	i, ok := p.holdings[b]
	if !ok {
		cost := int64(holdingOverhead + 8*n)
		if !s.affords(p, cost) {
			return nil, ErrLimit
		}
		off, ok := b.slab.alloc(n)
		if !ok {
			return nil, ErrLimit
		}
		s.charge(p, cost)
		p.holdings[b] = int32(len(b.holders))
		b.holders = append(b.holders, holder{slot: p.slot, off: off, len: int32(n)})
		return &b.holders[len(b.holders)-1], nil
	}
	h := &b.holders[i]
	if n > int(h.len) {
		cost := int64(8 * (n - int(h.len)))
		if !s.affords(p, cost) || !b.resize(h, n) {
			return nil, ErrLimit
		}
		s.charge(p, cost)
		b.maybeCompact()
	}
	return h, nil
}

// affords reports whether p's holdings may grow by cost bytes: within
// its own budget and within the budget of all peers together.
func (s *State) affords(p *peer, cost int64) bool {
	return p.holdingBytes+cost <= s.cfg.MaxHoldingBytesPerPeer && s.holdingBytes+cost <= s.cfg.MaxHoldingBytes
}

// charge counts d more bytes (or fewer, if negative) of holdings to p.
func (s *State) charge(p *peer, d int64) {
	p.holdingBytes += d
	s.holdingBytes += d
}

// notHeld returns the chunks p does not hold of b.
func (s *State) notHeld(p *peer, b *blobState, chunks []uint32) []uint32 {
	i, ok := p.holdings[b]
	if !ok {
		return chunks
	}
	row := b.row(&b.holders[i])
	var out []uint32
	for _, c := range chunks {
		if !row.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// clearChunks removes chunks from p's holding of b, if any.
func (s *State) clearChunks(p *peer, b *blobState, chunks []uint32) {
	i, ok := p.holdings[b]
	if !ok {
		return
	}
	h := &b.holders[i]
	row := b.row(h)
	for _, c := range chunks {
		if row.Has(c) {
			row[c/64] &^= 1 << (c % 64)
			h.n--
		}
	}
	if h.n == 0 {
		s.removeHolder(b, int(i))
		s.forgetIfEmpty(b)
	}
}

// removeHolder deletes b.holders[i], moving the last holder into its place.
func (s *State) removeHolder(b *blobState, i int) {
	h := &b.holders[i]
	p := s.bySlot[h.slot]
	s.charge(p, -int64(holdingOverhead+8*int(h.len)))
	delete(p.holdings, b)
	b.free(h)
	last := len(b.holders) - 1
	if i != last {
		b.holders[i] = b.holders[last]
		s.bySlot[b.holders[i].slot].holdings[b] = int32(i)
	}
	b.holders[last] = holder{}
	b.holders = b.holders[:last]
	b.maybeCompact()
}

// dropHoldings forgets everything p holds.
func (s *State) dropHoldings(p *peer) {
	for b, i := range p.holdings {
		s.removeHolder(b, int(i))
		s.forgetIfEmpty(b)
	}
}
