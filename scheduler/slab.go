package scheduler

import "math"

// slab holds the bitsets of all holders of one blob back to back in one
// slice, each holder's row at its own offset and length.
//
// Why: a query for one chunk tests one word in every holder's bitset. With
// a separate allocation per holding, those 1,000 words lie on 1,000 pages
// scattered over the heap (allocated peer by peer as they announced), and
// the query is a chain of cache and TLB misses: it measured ~150 µs. Back
// to back, the same words are read in address order at a fixed stride,
// which the hardware prefetcher streams.
//
// Rows are not padded to a common width: a word-major (column) layout
// would read even less, but would make every holder pay for the widest
// row, so one peer announcing a huge ordinal would cost the scheduler
// that many words for every holder of the blob. Here each row costs only
// its own words, which count against its peer's budget.
//
// A row that must grow and is not last moves to the end, leaving its old
// words dead; rows of departed holders are dead too. When dead words are
// more than half the slab, it is rewritten in holder order.
type slab struct {
	words []uint64
	dead  int
}

// minCompact is the slab size below which dead words are not worth a
// rewrite.
const minCompact = 4096

// maxSlabWords keeps offsets within int32.
const maxSlabWords = math.MaxInt32

// row returns h's bitset. It aliases the slab: do not keep it across a
// change of holdings.
func (b *blobState) row(h *holder) Bitset {
	end := h.off + h.len
	return Bitset(b.slab.words[h.off:end:end])
}

// alloc appends n zero words and returns their offset, or false if the
// slab would outgrow int32 offsets.
func (sl *slab) alloc(n int) (int32, bool) {
	off := len(sl.words)
	if off+n > maxSlabWords {
		return 0, false
	}
	sl.words = append(sl.words, make([]uint64, n)...)
	return int32(off), true
}

// resize makes h's row n words long, keeping its members (truncated if
// shorter). It returns false if the slab is full.
func (b *blobState) resize(h *holder, n int) bool {
	sl := &b.slab
	cur := int(h.len)
	switch {
	case n == cur:
		return true
	case n < cur:
		sl.dead += cur - n
		h.len = int32(n)
		return true
	case int(h.off)+cur == len(sl.words): // last row: grow in place
		if _, ok := sl.alloc(n - cur); !ok {
			return false
		}
	default:
		off, ok := sl.alloc(n)
		if !ok {
			return false
		}
		copy(sl.words[off:], sl.words[h.off:int(h.off)+cur])
		sl.dead += cur
		h.off = off
	}
	h.len = int32(n)
	return true
}

// free marks h's row dead.
func (b *blobState) free(h *holder) {
	if int(h.off+h.len) == len(b.slab.words) {
		clear(b.slab.words[h.off:])
		b.slab.words = b.slab.words[:h.off]
	} else {
		b.slab.dead += int(h.len)
	}
	h.off, h.len = 0, 0
}

// maybeCompact rewrites the slab in holder order once dead words
// outnumber live ones.
func (b *blobState) maybeCompact() {
	sl := &b.slab
	if len(sl.words) < minCompact || 2*sl.dead <= len(sl.words) {
		if len(b.holders) == 0 {
			sl.words, sl.dead = nil, 0
		}
		return
	}
	live := len(sl.words) - sl.dead
	words := make([]uint64, 0, live+live/8)
	for i := range b.holders {
		h := &b.holders[i]
		off := len(words)
		words = append(words, sl.words[h.off:h.off+h.len]...)
		h.off = int32(off)
	}
	sl.words, sl.dead = words, 0
}
