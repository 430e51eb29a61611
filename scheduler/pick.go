package scheduler

import (
	"hash/fnv"

	"damselfly/rafs"
)

// Pick returns the scheduler, of those given, that owns blob's state, by
// rendezvous (highest random weight) hashing: every scheduler gets a
// pseudo-random weight for the blob and the heaviest wins. Every peer
// computes the same owner from the same list with no coordination; when
// a scheduler leaves the list only the blobs it owned move (each to the
// runner-up for that blob), and when one joins it takes only the blobs it
// now wins, about 1/n of them. It returns "" for an empty list. Duplicate
// names count once; order does not matter.
//
// The weight is 64-bit FNV-1a over the scheduler name, a zero byte and
// the digest, passed through the SplitMix64 finaliser so that names that
// differ in one byte still get independent weights. Ties (of probability
// about n²/2⁶⁵) go to the smaller name.
func Pick(blob rafs.Digest, schedulers []string) string {
	best, bestW, found := "", uint64(0), false
	for _, s := range schedulers {
		w := weight(s, blob)
		if !found || w > bestW || (w == bestW && s < best) {
			best, bestW, found = s, w, true
		}
	}
	return best
}

func weight(scheduler string, blob rafs.Digest) uint64 {
	h := fnv.New64a()
	h.Write([]byte(scheduler))
	h.Write([]byte{0})
	h.Write(blob[:])
	return mix64(h.Sum64())
}

// mix64 is the SplitMix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
