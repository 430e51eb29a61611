package scheduler

import (
	"time"

	"damselfly/rafs"
)

// lease is one assignment: the scheduler told a requester to fetch chunks
// lo..hi (some of them) of blob from parent. Until the requester reports
// on it, or LeaseTimeout passes, it counts as load on the parent, it
// makes the requester a future holder of those chunks (tree.go), and it
// is what entitles the requester to report on the parent at all.
type lease struct {
	id      uint64 // key in the blob's leased index
	parent  *peer
	blob    rafs.Digest
	lo, hi  uint32 // lowest and highest chunk assigned
	expires time.Time
}

// addLease records an assignment of chunks of b to parent for requester
// r, releasing r's oldest one if r is at Config.MaxLeasesPerPeer.
func (s *State) addLease(r, parent *peer, b *blobState, lo, hi uint32, now time.Time) {
	if len(r.leases) >= s.cfg.MaxLeasesPerPeer {
		s.releaseOldest(r)
	}
	s.nextLease++
	l := lease{id: s.nextLease, parent: parent, blob: b.digest, lo: lo, hi: hi, expires: now.Add(s.cfg.LeaseTimeout)}
	r.leases = append(r.leases, l)
	b.leased.add(leaseRef{id: l.id, req: r, lo: lo, hi: hi, expires: l.expires})
	s.setPending(parent, +1)
}

// endLease undoes what addLease did for l, other than removing it from
// the requester's list.
func (s *State) endLease(l lease) {
	s.setPending(l.parent, -1)
	if b := s.blobs[l.blob]; b != nil {
		b.leased.remove(l.id, l.lo, l.hi)
		s.forgetIfEmpty(b)
	}
}

// releaseOldest ends r's oldest lease.
func (s *State) releaseOldest(r *peer) {
	s.endLease(r.leases[0])
	r.leases[0] = lease{}
	r.leases = r.leases[1:]
	if len(r.leases) == 0 {
		r.leases = nil
	}
}

// sweepLeases ends r's leases that timed out. Leases are added in time
// order, so the expired ones are at the front.
func (s *State) sweepLeases(r *peer, now time.Time) {
	for len(r.leases) > 0 && !now.Before(r.leases[0].expires) {
		s.releaseOldest(r)
	}
}

// takeLease ends and returns r's oldest lease on parent id for blob that
// covers chunk (any chunk if anyChunk), if there is one.
func (s *State) takeLease(r *peer, id string, blob rafs.Digest, chunk uint32, anyChunk bool) (lease, bool) {
	for i, l := range r.leases {
		if l.parent.id != id || l.blob != blob || (!anyChunk && (chunk < l.lo || chunk > l.hi)) {
			continue
		}
		s.endLease(l)
		r.leases = append(r.leases[:i], r.leases[i+1:]...)
		return l, true
	}
	return lease{}, false
}
