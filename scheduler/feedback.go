package scheduler

import (
	"fmt"
	"slices"
	"time"

	"damselfly/rafs"
)

// Outcome is a requester's account of one assignment: fetching chunks of
// Blob from a parent the scheduler named.
type Outcome struct {
	Blob     rafs.Digest
	Bytes    int64         // stored bytes received
	Duration time.Duration // from request to last byte
	OK       bool          // every assigned chunk arrived and verified
	// BadBytes: chunk BadChunk failed verification against its digest.
	BadBytes bool
	BadChunk uint32
	// Missing are chunks the parent answered "not found": its
	// announcement is stale (evicted without a Drop, or a lie).
	Missing []uint32
}

// Feedback and bans: what a report may do, and why it cannot do more.
//
// A report must name an assignment: the scheduler must have told the
// reporter to fetch that blob from that parent within LeaseTimeout (and,
// for bad bytes, a range of chunks that includes BadChunk), and each
// assignment takes one report. So a peer can only speak about peers it
// was sent to, and no more often than it was sent to them.
//
// Every report feeds the parent's moving averages of success and
// throughput (score.go): slow or failing parents rank lower. Missing
// chunks are cleared from the parent's holding and refuted for a while
// (refute.go), so that a peer announcing chunks it does not hold is not
// named for them again and again.
//
// Bad bytes are an accusation, and the scheduler cannot check it (it
// knows chunk ordinals, not digests or bytes). One accusation therefore
// costs the accused only little: the bad chunk is cleared from its
// holding, and the accuser is never sent to it again for BanDuration.
// A cluster-wide ban (holdings dropped, never named as a parent, its
// announcements refused, for BanDuration) needs accusers on BanQuorum
// distinct machines within BanDuration. A machine is the accuser's
// PeerInfo.Source, the address the transport saw it register from: a
// peer ID is a key pair anyone can make by the thousand, and a host
// label is whatever the peer wrote, so counting either would let one
// machine running many peer IDs (a sybil) ban an honest parent alone.
// Accusations from several peer IDs on one machine count once (the
// newest is kept). A banned peer's accusations do not count, and each
// reporter has a token bucket of AccusationBurst accusations refilled
// one per AccusationRefill, kept by peer ID so that rejoining does not
// refill it. With the default quorum of 2, no single machine can get
// anyone banned, however many peers it runs and however it lies; a peer
// that really sends bad bytes is banned as soon as a victim on a second
// machine reports it, and no bad byte reaches a reader meanwhile because
// requesters verify every chunk. The price: honest nodes behind one NAT
// address count as one machine, so banning a bad peer they alone see
// takes an operator (Ban).

// accusation is one reporter's bad-bytes report about a peer.
type accusation struct {
	by     string // the reporter's peer ID
	source string // the machine it reported from; see sourceOf
	at     time.Time
}

// sourceOf names p's machine for ban quorums (PeerInfo.Source).
func sourceOf(p *peer) string { return p.info.source() }

// ban is a cluster-wide ban of a peer ID.
type ban struct {
	since, until time.Time
	accusers     []string
}

// reporter is what is kept about a peer as a reporter, by ID across
// sessions.
type reporter struct {
	tokens   float64
	tokensAt time.Time
	avoid    []avoidance
}

// avoidance: a peer the reporter accused, not to be named to it again
// until the time given.
type avoidance struct {
	id    string
	until time.Time
}

func (rp *reporter) avoids(id string, now time.Time) bool {
	for _, a := range rp.avoid {
		if a.id == id && now.Before(a.until) {
			return true
		}
	}
	return false
}

// Report records reporter's outcome of an assignment to about. It returns
// whether the report got about banned. Errors: ErrUnknownPeer for an
// unregistered reporter, ErrInvalid for a report about oneself,
// ErrNoAssignment when no unreported assignment matches, ErrRateLimited
// when an accusation is over the reporter's budget (the outcome still
// counts as a failure), ErrBanned when a banned reporter accuses.
func (s *State) Report(reporterID, about string, o Outcome, now time.Time) (banned bool, err error) {
	if !o.BadBytes && len(o.Missing) == 0 {
		if done, err := s.reportShared(reporterID, about, o, now); done {
			return false, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.member(reporterID, now)
	if err != nil {
		return false, fmt.Errorf("report on %q: %w", about, err)
	}
	if about == reporterID {
		return false, fmt.Errorf("report by %q on itself: %w", about, ErrInvalid)
	}
	s.sweepLeases(r, now)
	l, ok := s.takeLease(r, about, o.Blob, o.BadChunk, !o.BadBytes)
	if !ok {
		return false, fmt.Errorf("report by %q on %q for %s: %w", reporterID, about, o.Blob, ErrNoAssignment)
	}
	p := l.parent
	s.feedback(p, o)
	if b := s.blobs[o.Blob]; b != nil && !p.gone && len(o.Missing) > 0 {
		in := slices.DeleteFunc(slices.Clone(o.Missing), func(c uint32) bool { return c < l.lo || c > l.hi })
		dropped := s.notHeld(p, b, in)
		s.clearChunks(p, b, in)
		s.refute(p, o.Blob, in, dropped, now)
	}
	if !o.BadBytes {
		return false, nil
	}
	if s.banned(r, now) {
		return false, fmt.Errorf("accusation by %q: %w", reporterID, ErrBanned)
	}
	rp := s.reporter(r)
	if !rp.take(now, s.cfg) {
		return false, fmt.Errorf("accusation by %q on %q: %w", reporterID, about, ErrRateLimited)
	}
	if b := s.blobs[o.Blob]; b != nil && !p.gone {
		s.clearChunks(p, b, []uint32{o.BadChunk})
	}
	rp.avoid = append(slices.DeleteFunc(rp.avoid, func(a avoidance) bool { return a.id == about }),
		avoidance{id: about, until: now.Add(s.cfg.BanDuration)})
	return s.accuse(about, r, now), nil
}

// reportShared is Report for an outcome that changes no holding and
// accuses nobody, as most are: it needs only the read lock and rec (see
// State), so it does not hold up queries. It returns false, having done
// nothing, if the reporter must first be removed (its TTL ran out) or
// is unknown, which takes the write lock.
func (s *State) reportShared(reporterID, about string, o Outcome, now time.Time) (bool, error) {
	s.mu.RLock()
	r := s.peers[reporterID]
	if r == nil || !s.alive(r, now) {
		s.mu.RUnlock()
		return false, nil
	}
	if about == reporterID {
		s.mu.RUnlock()
		return true, fmt.Errorf("report by %q on itself: %w", about, ErrInvalid)
	}
	s.rec.Lock()
	s.share(true)
	s.sweepLeases(r, now)
	l, ok := s.takeLease(r, about, o.Blob, o.BadChunk, true)
	if ok {
		s.feedback(l.parent, o)
	}
	emptied := s.share(false)
	s.rec.Unlock()
	s.mu.RUnlock()
	s.forgetEmptied(emptied)
	if !ok {
		return true, fmt.Errorf("report by %q on %q for %s: %w", reporterID, about, o.Blob, ErrNoAssignment)
	}
	return true, nil
}

// feedback folds an outcome into p's moving averages.
func (s *State) feedback(p *peer, o Outcome) {
	w := s.cfg.FeedbackWeight
	ok := 0.0
	if o.OK && !o.BadBytes {
		ok = 1
	}
	p.success = (1-w)*p.success + w*ok
	if o.Bytes > 0 && o.Duration > 0 {
		tp := float64(o.Bytes) / o.Duration.Seconds()
		if p.throughput == 0 {
			p.throughput = tp
		} else {
			p.throughput = (1-w)*p.throughput + w*tp
		}
	}
	p.reports++
	s.refresh(p)
}

// reporter returns r's reporter record, creating it with a full bucket.
func (s *State) reporter(r *peer) *reporter {
	if r.rep == nil {
		r.rep = s.reporters[r.id]
		if r.rep == nil {
			r.rep = &reporter{tokens: float64(s.cfg.AccusationBurst)}
			s.reporters[r.id] = r.rep
		}
	}
	return r.rep
}

// take spends one accusation token if there is one.
func (rp *reporter) take(now time.Time, cfg Config) bool {
	rp.refill(now, cfg)
	if rp.tokens < 1 {
		return false
	}
	rp.tokens--
	return true
}

func (rp *reporter) refill(now time.Time, cfg Config) {
	if !rp.tokensAt.IsZero() && now.After(rp.tokensAt) {
		rp.tokens += float64(now.Sub(rp.tokensAt)) / float64(cfg.AccusationRefill)
	}
	rp.tokens = min(rp.tokens, float64(cfg.AccusationBurst))
	if rp.tokensAt.IsZero() || now.After(rp.tokensAt) {
		rp.tokensAt = now
	}
}

// accuse records r's accusation of id and bans id once accusers on
// BanQuorum distinct machines (sources) accused it within BanDuration.
// An accusation replaces any earlier one by the same peer or from the
// same machine, so the list is one per machine and the quorum counts
// machines, not peer IDs.
func (s *State) accuse(id string, r *peer, now time.Time) bool {
	src := sourceOf(r)
	as := slices.DeleteFunc(s.accused[id], func(a accusation) bool {
		return a.by == r.id || a.source == src || now.Sub(a.at) >= s.cfg.BanDuration
	})
	as = append(as, accusation{by: r.id, source: src, at: now})
	if len(as) < s.cfg.BanQuorum {
		s.accused[id] = as
		return false
	}
	delete(s.accused, id)
	accusers := make([]string, len(as))
	for i, a := range as {
		accusers[i] = a.by
	}
	s.ban(id, accusers, now)
	return true
}

// ban bans id for BanDuration: its holdings and origin fetch turns are
// dropped, and it is not named as a parent nor heard announcing until the
// ban ends. It may still ask for parents: a ban stops a peer serving, not
// reading.
func (s *State) ban(id string, accusers []string, now time.Time) {
	slices.Sort(accusers)
	bn := &ban{since: now, until: now.Add(s.cfg.BanDuration), accusers: accusers}
	s.bans[id] = bn
	if p := s.peers[id]; p != nil {
		s.hotOf(p).bannedUntil = bn.until.UnixNano()
		s.dropHoldings(p)
		s.dropFetches(p)
	}
}

// sweepBans forgets lifted bans, old accusations and avoidances, and
// reporter records that hold nothing but a full bucket.
func (s *State) sweepBans(now time.Time) {
	for id, b := range s.bans {
		if !now.Before(b.until) {
			delete(s.bans, id)
		}
	}
	for id, as := range s.accused {
		as = slices.DeleteFunc(as, func(a accusation) bool { return now.Sub(a.at) >= s.cfg.BanDuration })
		if len(as) == 0 {
			delete(s.accused, id)
		} else {
			s.accused[id] = as
		}
	}
	for id, rp := range s.reporters {
		rp.avoid = slices.DeleteFunc(rp.avoid, func(a avoidance) bool { return !now.Before(a.until) })
		rp.refill(now, s.cfg)
		if len(rp.avoid) == 0 && rp.tokens >= float64(s.cfg.AccusationBurst) {
			delete(s.reporters, id)
			if p := s.peers[id]; p != nil {
				p.rep = nil
			}
		}
	}
}

// Ban bans peerID for Config.BanDuration at an operator's word (the admin
// API), as a quorum of accusations would.
func (s *State) Ban(peerID string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.accused, peerID)
	s.ban(peerID, []string{"operator"}, now)
}

// Unban lifts a ban on peerID and forgets accusations against it. The
// peer announces its holdings again to be offered as a parent.
func (s *State) Unban(peerID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bans, peerID)
	delete(s.accused, peerID)
	if p := s.peers[peerID]; p != nil {
		s.hotOf(p).bannedUntil = 0
	}
}
