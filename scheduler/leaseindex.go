package scheduler

import (
	"slices"
	"time"
)

// leaseIndex is a blob's outstanding leases, found by the chunks they
// cover. treeWait asks it for the future holders of the few chunks of
// one query; with every peer pulling the same image, a blob has
// thousands of leases, and looking at all of them per query was most of
// a query's time.
//
// A lease of chunks lo..hi sits in one bucket: at the lowest level L at
// which it spans at most two neighbouring buckets of 64<<L chunks, in
// the bucket of lo. So the leases covering chunk c are, at each level, in
// bucket c>>(6+L) or the one before it. Runs of up to 64 chunks are at
// level 0 or 1, a whole 1,024-chunk blob at level 4; levels with no
// lease are skipped. Within a bucket leases are kept in the order they
// were made, so that the search, and the fetchers it names, depend only
// on the calls made.
type leaseIndex struct {
	buckets map[uint64][]leaseRef // by level<<32 | bucket
	levels  [maxLeaseLevel + 1]int32
	n       int
}

// maxLeaseLevel is the level of a lease spanning every uint32 ordinal.
const maxLeaseLevel = 25

// leaseRef is a lease as the blob's index of future holders keeps it.
type leaseRef struct {
	id      uint64
	req     *peer
	lo, hi  uint32
	expires time.Time
}

// leaseLevel returns the level of a lease of lo..hi.
func leaseLevel(lo, hi uint32) int {
	l := 0
	for hi>>(6+l) > lo>>(6+l)+1 {
		l++
	}
	return l
}

func bucketKey(level int, bucket uint32) uint64 { return uint64(level)<<32 | uint64(bucket) }

func (x *leaseIndex) len() int { return x.n }

// add records l.
func (x *leaseIndex) add(l leaseRef) {
	if x.buckets == nil {
		x.buckets = map[uint64][]leaseRef{}
	}
	lv := leaseLevel(l.lo, l.hi)
	k := bucketKey(lv, l.lo>>(6+lv))
	x.buckets[k] = append(x.buckets[k], l)
	x.levels[lv]++
	x.n++
}

// remove forgets lease id of lo..hi, if recorded.
func (x *leaseIndex) remove(id uint64, lo, hi uint32) {
	lv := leaseLevel(lo, hi)
	k := bucketKey(lv, lo>>(6+lv))
	b := x.buckets[k]
	i := slices.IndexFunc(b, func(l leaseRef) bool { return l.id == id })
	if i < 0 {
		return
	}
	if len(b) == 1 {
		delete(x.buckets, k)
	} else {
		x.buckets[k] = slices.Delete(b, i, i+1)
	}
	x.levels[lv]--
	if x.n--; x.n == 0 {
		x.buckets = nil
	}
}

// near calls yield with every lease that may cover one of chunks
// (ascending), and some that do not: the caller checks. It visits each
// lease at most once, by level, then bucket, then age, and stops when
// yield returns false.
func (x *leaseIndex) near(chunks []uint32, yield func(*leaseRef) bool) {
	if x.n == 0 || len(chunks) == 0 {
		return
	}
	for lv := range x.levels {
		if x.levels[lv] == 0 {
			continue
		}
		shift := uint(6 + lv)
		next := uint32(0) // lowest bucket not yet visited
		for _, c := range chunks {
			hi := c >> shift
			for bk := max(hi, 1) - 1; bk <= hi; bk++ {
				if bk < next {
					continue
				}
				next = bk + 1
				b := x.buckets[bucketKey(lv, bk)]
				for i := range b {
					if !yield(&b[i]) {
						return
					}
				}
			}
		}
	}
}
