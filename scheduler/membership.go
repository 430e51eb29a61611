package scheduler

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Label keys that locality is judged by. Peers on one host share a
// host's disks and NIC, peers in one rack its top-of-rack switch, peers
// in one zone cheap links; each is preferred to the next.
const (
	LabelHost = "host"
	LabelRack = "rack"
	LabelZone = "zone"
)

// Limits on what a peer may register, checked before anything is stored.
const (
	MaxAddrs     = 16
	MaxLabels    = 16
	MaxStringLen = 256 // of a peer ID, an address, a label key or value
)

// PeerInfo is what a peer says about itself when it registers, and
// (Source) where the transport saw it register from.
type PeerInfo struct {
	Addrs          []string          // multiaddrs other peers dial it on
	Labels         map[string]string // LabelHost, LabelRack, LabelZone, others
	UploadCapacity int64             // bytes/s it may upload; 0 = unknown
	// Source names the machine the registration came from as the
	// transport verified it, never as the peer claims: the daemon sets
	// it from the connection's remote IP address (an IPv6 address cut
	// to its /64, which one machine may own whole). Peer IDs cost
	// nothing and labels are the peer's own word, so a ban quorum
	// counts distinct Sources (feedback.go). Peers registered without
	// a Source all count as one machine.
	Source string
}

// Load is what a peer reports about itself in each heartbeat.
type Load struct {
	ActiveUploads     int   // chunk streams it is serving now
	UploadBytesPerSec int64 // recent upload rate
}

func (info PeerInfo) validate() error {
	if len(info.Addrs) > MaxAddrs {
		return fmt.Errorf("%d addresses, more than %d", len(info.Addrs), MaxAddrs)
	}
	for _, a := range info.Addrs {
		if len(a) > MaxStringLen {
			return fmt.Errorf("address of %d bytes, more than %d", len(a), MaxStringLen)
		}
	}
	if len(info.Labels) > MaxLabels {
		return fmt.Errorf("%d labels, more than %d", len(info.Labels), MaxLabels)
	}
	for k, v := range info.Labels {
		if len(k) > MaxStringLen || len(v) > MaxStringLen {
			return fmt.Errorf("label %.32q longer than %d bytes", k, MaxStringLen)
		}
	}
	if len(info.Source) > MaxStringLen {
		return fmt.Errorf("source of %d bytes, more than %d", len(info.Source), MaxStringLen)
	}
	if info.UploadCapacity < 0 {
		return fmt.Errorf("negative upload capacity %d", info.UploadCapacity)
	}
	return nil
}

// Register starts a session for peerID at now. A peer already registered
// starts a new one: its holdings, origin fetch turns and outstanding
// assignments from the old session are dropped (it announces its holdings
// in full after registering), while its feedback record, a ban, and
// accusations it made or received are kept. A peer that is not a member
// is refused with ErrTooManyPeers when Config.MaxPeers are, or when
// Config.MaxPeersPerSource are from its machine (info.Source); a member
// registering again is refused only for moving to a machine that has its
// bound, and then keeps its session. Members whose TTL ran out are
// dropped first to make room. The State keeps copies of info's slices
// and map.
func (s *State) Register(peerID string, info PeerInfo, now time.Time) error {
	if peerID == "" || len(peerID) > MaxStringLen {
		return fmt.Errorf("register: peer ID of %d bytes: %w", len(peerID), ErrInvalid)
	}
	if err := info.validate(); err != nil {
		return fmt.Errorf("register %q: %v: %w", peerID, err, ErrInvalid)
	}
	info.Addrs = slices.Clone(info.Addrs)
	info.Labels = maps.Clone(info.Labels)

	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[peerID]
	member := p != nil && s.alive(p, now)
	if p != nil && !member {
		s.removePeer(p)
	}
	src := info.source()
	if err := s.room(src, !member, !member || p.info.source() != src, now); err != nil {
		return fmt.Errorf("register %q: %w", peerID, err)
	}
	if member {
		s.dropSession(p)
		s.releaseLabels(p)
		s.releaseSource(p)
	} else {
		p = &peer{id: peerID, success: 1, holdings: map[*blobState]int32{}}
		s.peers[peerID] = p
		s.addSlot(p)
		if b := s.bans[peerID]; b != nil {
			s.hotOf(p).bannedUntil = b.until.UnixNano()
		}
		p.rep = s.reporters[peerID]
	}
	p.info = info
	s.sources[src]++
	hot := s.hotOf(p)
	hot.zone = s.intern(info.Labels[LabelZone])
	hot.rack = s.intern(info.Labels[LabelRack])
	hot.host = s.intern(info.Labels[LabelHost])
	hot.seen, p.joined = now.UnixNano(), now
	p.load = Load{}
	s.refresh(p)
	return nil
}

// Heartbeat renews peerID's membership and records its load. It fails
// with ErrUnknownPeer if the peer is not registered or its TTL ran out:
// the peer must register again and announce in full.
func (s *State) Heartbeat(peerID string, load Load, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.member(peerID, now)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if load.ActiveUploads < 0 || load.UploadBytesPerSec < 0 {
		return fmt.Errorf("heartbeat %q: negative load: %w", peerID, ErrInvalid)
	}
	p.load = load
	s.hotOf(p).seen = now.UnixNano()
	s.refresh(p)
	return nil
}

// Unregister ends peerID's membership at once (a clean shutdown), dropping
// its holdings. Unknown peers are ignored.
func (s *State) Unregister(peerID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.peers[peerID]; p != nil {
		s.removePeer(p)
	}
}

// Expire drops every peer whose last registration or heartbeat is older
// than Config.PeerTTL at now, with all its holdings, and returns their IDs
// in order. It also releases timed-out assignments, frees origin fetch
// turns whose time ran out, and forgets lifted bans and old accusations.
// The daemon calls it every second or so; answers never name an expired
// peer even between calls.
func (s *State) Expire(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for id, p := range s.peers {
		if !s.alive(p, now) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		s.removePeer(s.peers[id])
	}
	for _, p := range s.peers {
		s.sweepLeases(p, now)
		if p.refuted != nil {
			s.sweepRefuted(p, now)
		}
	}
	s.sweepOrigin(now)
	s.sweepBans(now)
	return gone
}

// room returns ErrTooManyPeers, wrapped, if a peer registering from
// machine src may not: when it joins (is not a member) and Config.MaxPeers
// are members, or when it comes to src (joins, or moves from another
// machine) and Config.MaxPeersPerSource members are from src. At a bound
// it first drops the members whose TTL ran out, as Expire would;
// finding none, it notes when the first of them could run out, and until
// then answers at once, so that refusals at a bound cost no scan of the
// members each.
func (s *State) room(src string, joins, comes bool, now time.Time) error {
	full := func() error {
		if joins && len(s.peers) >= s.cfg.MaxPeers {
			return fmt.Errorf("%d members already: %w", len(s.peers), ErrTooManyPeers)
		}
		if comes && s.sources[src] >= s.cfg.MaxPeersPerSource {
			return fmt.Errorf("%d members already from %s: %w", s.sources[src], describeSource(src), ErrTooManyPeers)
		}
		return nil
	}
	err := full()
	if err == nil || now.UnixNano() < s.fullUntil {
		return err
	}
	var gone []*peer
	next := int64(math.MaxInt64)
	for _, p := range s.peers {
		if !s.alive(p, now) {
			gone = append(gone, p)
		} else {
			next = min(next, s.hotOf(p).seen+s.cfg.PeerTTL.Nanoseconds()+1)
		}
	}
	for _, p := range gone {
		s.removePeer(p)
	}
	s.fullUntil = next
	return full()
}

// source returns the machine info.Source names, or unknownSource.
func (info PeerInfo) source() string {
	if info.Source == "" {
		return unknownSource
	}
	return info.Source
}

// unknownSource stands for the machine of every peer registered without
// a PeerInfo.Source: they all count as one (for ban quorums and
// Config.MaxPeersPerSource), so a caller that cannot say where peers are
// does not let one of them ban alone, or take every place.
const unknownSource = "\x00unknown"

func describeSource(src string) string {
	if src == unknownSource {
		return "no known address"
	}
	return src
}

// releaseSource uncounts p from the members of its machine.
func (s *State) releaseSource(p *peer) {
	src := p.info.source()
	if s.sources[src]--; s.sources[src] <= 0 {
		delete(s.sources, src)
	}
}

// dropSession forgets what p said in its current session: holdings,
// origin fetch turns and its outstanding assignments as requester.
func (s *State) dropSession(p *peer) {
	s.dropHoldings(p)
	s.dropFetches(p)
	for len(p.leases) > 0 {
		s.releaseOldest(p)
	}
}

// removePeer ends p's membership.
func (s *State) removePeer(p *peer) {
	s.dropSession(p)
	s.releaseLabels(p)
	s.releaseSource(p)
	s.freeSlot(p)
	p.gone = true
	delete(s.peers, p.id)
}

func (s *State) releaseLabels(p *peer) {
	for _, k := range [...]string{LabelZone, LabelRack, LabelHost} {
		s.release(p.info.Labels[k])
	}
	hot := s.hotOf(p)
	hot.zone, hot.rack, hot.host = 0, 0, 0
}
