package scheduler

import "math/bits"

// request is the set of chunks of one Parents call, as a bitset in one of
// two shapes, whichever is smaller: dense, the words lo..lo+len(rem) of
// ordinal space (a run of nearby chunks, the usual case); or sparse, bit
// k standing for want[k] (chunks scattered far apart, where the dense
// shape would be mostly empty words). Candidates' coverage is kept as
// masks of the same shape (request space), so the greedy rounds of
// Parents work on a few words per candidate in one contiguous scratch
// array and never go back to the holdings.
type request struct {
	want  []uint32 // sorted, unique
	dense bool
	lo    int
	rem   []uint64 // chunks not yet placed, in request space
	left  int
}

// maxDenseWords is the widest dense shape used even where the sparse one
// would be smaller: up to it, a dense coverage test (one AND per word)
// beats a sparse one (a bit test per chunk).
const maxDenseWords = 16

// reset makes q the request for want, reusing buf for the bitset.
func (q *request) reset(want []uint32, buf []uint64) {
	q.want, q.left = want, len(want)
	lo, hi := int(want[0]/64), int(want[len(want)-1]/64)
	sparse := (len(want) + 63) / 64
	span := hi - lo + 1
	q.dense = span <= maxDenseWords || span <= sparse+1
	n := sparse
	if q.dense {
		q.lo, n = lo, span
	}
	q.rem = append(buf[:0], make([]uint64, n)...)
	for k, c := range want {
		if q.dense {
			w := int(c/64) - lo
			q.rem[w] |= 1 << (c % 64)
		} else {
			q.rem[k/64] |= 1 << (k % 64)
		}
	}
}

// restrict writes row ∩ rem, in request space, to dst (len(rem) words)
// and returns its size.
func (q *request) restrict(row Bitset, dst []uint64) int {
	n := 0
	if q.dense {
		end := min(len(row)-q.lo, len(q.rem))
		for i := 0; i < end; i++ {
			x := row[q.lo+i] & q.rem[i]
			dst[i] = x
			n += bits.OnesCount64(x)
		}
		for i := max(end, 0); i < len(dst); i++ {
			dst[i] = 0
		}
		return n
	}
	clear(dst)
	for wi, w := range q.rem {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			w &= w - 1
			if row.Has(q.want[wi*64+b]) {
				dst[wi] |= 1 << b
				n++
			}
		}
	}
	return n
}

// gain returns |mask ∩ rem|.
func (q *request) gain(mask []uint64) int {
	n := 0
	for i, w := range q.rem {
		n += bits.OnesCount64(mask[i] & w)
	}
	return n
}

// take removes mask ∩ rem from rem and appends those chunks to dst.
func (q *request) take(mask []uint64, dst []uint32) []uint32 {
	for i := range q.rem {
		x := mask[i] & q.rem[i]
		q.rem[i] &^= x
		q.left -= bits.OnesCount64(x)
		dst = q.ordinals(i, x, dst)
	}
	return dst
}

// ordinals appends the chunks of word i of a request-space mask.
func (q *request) ordinals(i int, x uint64, dst []uint32) []uint32 {
	for x != 0 {
		b := bits.TrailingZeros64(x)
		x &= x - 1
		dst = append(dst, q.at(i, b))
	}
	return dst
}

// at returns the chunk of bit b of word i of request space.
func (q *request) at(i, b int) uint32 {
	if q.dense {
		return uint32((q.lo+i)*64 + b)
	}
	return q.want[i*64+b]
}
