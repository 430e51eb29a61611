package scheduler

import "math/bits"

// Bitset is a set of chunk ordinals: bit i%64 of word i/64 is chunk i.
// Words past the end are zero, so a Bitset only needs to be as long as
// its highest member. Peers build one with Set to announce a whole blob
// (AnnounceFull); the scheduler stores one per (peer, blob) held.
//
// Plain bitsets were chosen over compressed ones (roaring and the like)
// because RAFS blobs are small in chunks (a 1 GiB layer in 1 MiB chunks
// is 1,024 chunks: 128 bytes as bits) and partly held blobs are dense and
// scattered, where array or run containers are larger than the bits. A
// coverage test is then one AND and popcount per 64 chunks.
type Bitset []uint64

// words returns how many words hold ordinals below n.
func words(n uint32) int { return int((uint64(n) + 63) / 64) }

// Has reports whether i is in the set.
func (b Bitset) Has(i uint32) bool {
	w := int(i / 64)
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

// Set adds i, growing b as needed, and returns the grown set.
func (b Bitset) Set(i uint32) Bitset {
	w := int(i / 64)
	if w >= len(b) {
		b = b.grow(w + 1)
	}
	b[w] |= 1 << (i % 64)
	return b
}

// Count returns the number of members.
func (b Bitset) Count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// Ordinals appends the members, ascending, to dst.
func (b Bitset) Ordinals(dst []uint32) []uint32 {
	for wi, w := range b {
		for w != 0 {
			dst = append(dst, uint32(wi*64+bits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
	return dst
}

// BitsetOf returns the set of the given ordinals.
func BitsetOf(ordinals ...uint32) Bitset {
	var b Bitset
	for _, i := range ordinals {
		b = b.Set(i)
	}
	return b
}

// grow returns b extended to n words, keeping its members.
func (b Bitset) grow(n int) Bitset {
	if n <= cap(b) {
		old := len(b)
		b = b[:n]
		clear(b[old:])
		return b
	}
	// Exact-size growth for the first allocation (most holdings are
	// announced whole), doubling after, so bits set one at a time in
	// ascending order cost amortised O(1).
	c := n
	if len(b) > 0 && c < 2*len(b) {
		c = 2 * len(b)
	}
	nb := make(Bitset, n, c)
	copy(nb, b)
	return nb
}

// trim drops zero words from the end.
func (b Bitset) trim() Bitset {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return b[:n]
}
