package scheduler

import (
	"slices"
	"testing"
)

// The index finds every lease covering one of the chunks asked about,
// once, whatever the leases' spans, and forgets removed ones.
func TestLeaseIndexNear(t *testing.T) {
	rng := newRand(3)
	var x leaseIndex
	var all []leaseRef
	span := func() uint32 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint32(rng.IntN(16))
		case 2:
			return uint32(rng.IntN(1024))
		}
		return uint32(rng.IntN(1 << 20))
	}
	for id := uint64(1); id <= 3000; id++ {
		if len(all) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(all))
			x.remove(all[i].id, all[i].lo, all[i].hi)
			all = slices.Delete(all, i, i+1)
		}
		lo := uint32(rng.IntN(1 << 20))
		all = append(all, leaseRef{id: id, lo: lo, hi: lo + span()})
		x.add(all[len(all)-1])
		if x.len() != len(all) {
			t.Fatalf("len %d, want %d", x.len(), len(all))
		}
		if id%50 != 0 {
			continue
		}
		var chunks []uint32
		base := uint32(rng.IntN(1 << 20))
		for range 1 + rng.IntN(20) {
			chunks = append(chunks, base+uint32(rng.IntN(1<<(2*rng.IntN(10)))))
		}
		slices.Sort(chunks)
		chunks = slices.Compact(chunks)
		covers := func(l leaseRef) bool {
			i, _ := slices.BinarySearch(chunks, l.lo)
			return i < len(chunks) && chunks[i] <= l.hi
		}
		var want, got []uint64
		for _, l := range all {
			if covers(l) {
				want = append(want, l.id)
			}
		}
		seen := map[uint64]bool{}
		x.near(chunks, func(l *leaseRef) bool {
			if seen[l.id] {
				t.Fatalf("lease %d yielded twice", l.id)
			}
			seen[l.id] = true
			if covers(*l) {
				got = append(got, l.id)
			}
			return true
		})
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("chunks %v: leases %v, want %v", chunks, got, want)
		}
	}
	for _, l := range all {
		x.remove(l.id, l.lo, l.hi)
	}
	if x.len() != 0 || x.buckets != nil {
		t.Errorf("%d leases, %d buckets left after removing all", x.len(), len(x.buckets))
	}
}

// A lease's level keeps its span within two neighbouring buckets.
func TestLeaseLevel(t *testing.T) {
	tests := []struct {
		lo, hi uint32
		want   int
	}{
		{0, 0, 0},
		{0, 127, 0},
		{63, 64, 0},
		{63, 128, 1},
		{0, 1023, 3},
		{100, 1099, 4},
		{0, 1<<32 - 1, maxLeaseLevel},
	}
	for _, tt := range tests {
		if got := leaseLevel(tt.lo, tt.hi); got != tt.want {
			t.Errorf("leaseLevel(%d, %d) = %d, want %d", tt.lo, tt.hi, got, tt.want)
		}
	}
}
