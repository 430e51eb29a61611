package rafs

import (
	"encoding/binary"
	"math/bits"
	"sync"

	"lukechampine.com/blake3"
	"lukechampine.com/blake3/guts"
)

// blake3Group is what one SIMD pass of the BLAKE3 compressor hashes: 16
// chunks of 1 KiB side by side (AVX-512; two AVX2 passes elsewhere).
const (
	blake3GroupChunks = guts.MaxSIMD
	blake3GroupSize   = blake3GroupChunks * guts.ChunkSize
	blake3GroupHeight = 4 // log2(blake3GroupChunks): a group's subtree height
)

// blake3Tails holds the zero-padded buffers that the last, partial group of
// an input is hashed from: the SIMD pass reads a whole group.
var blake3Tails = sync.Pool{New: func() any { return new([blake3GroupSize]byte) }}

// blake3Sum returns the BLAKE3 hash (256 bits, unkeyed) of b, computed on
// the calling goroutine. The library's Sum256 spreads an input above 16
// KiB over a goroutine per 16 KiB: for a 1 MiB chunk that is about 70
// goroutines and the wake-ups of idle threads they cause, which on a node
// whose cores are already busy moving chunks (every verification hashes
// a whole chunk) cost more than the parallelism returns.
func blake3Sum(b []byte) Digest {
	if len(b) <= guts.ChunkSize {
		return blake3.Sum256(b) // one chunk: no tree, no goroutines
	}
	var h blake3Progress
	h.advance(b, len(b))
	return h.finish(b)
}

// blake3Progress hashes an input of known length that arrives front to
// back, so that each part is hashed while it is still in the CPU's
// caches: advance hashes what has arrived, finish the rest.
//
// The tree is BLAKE3's: 1 KiB chunks are the leaves, and every subtree
// is as large a power of two of chunks as fits, left to right. The input
// is hashed 16 chunks at a time; each full group but the last is a
// complete subtree of height 4, merged into a stack by height the way a
// binary counter carries; the last group (1 byte to 16 KiB) is the
// rightmost subtree, and the stack folds onto it from the top down.
type blake3Progress struct {
	stack   [64][8]uint32 // stack[h]: a subtree of height h, if counter's bit h is set
	counter uint64        // chunks hashed into the stack
	done    int           // bytes hashed into the stack
	// key, when not nil, makes this BLAKE3's keyed hash under it (its
	// words, little endian); set it before the first advance.
	key *[8]uint32
}

// params are the key words and domain flags every compression of h uses.
func (h *blake3Progress) params() (*[8]uint32, uint32) {
	if h.key != nil {
		return h.key, guts.FlagKeyedHash
	}
	return &guts.IV, 0
}

// blake3KeyWords turns a 32-byte BLAKE3 key into the words the
// compression function takes.
func blake3KeyWords(k Digest) [8]uint32 {
	var w [8]uint32
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(k[4*i:])
	}
	return w
}

// blake3KeyedSum is blake3Sum for BLAKE3's keyed hash under key.
func blake3KeyedSum(key *[8]uint32, b []byte) Digest {
	h := blake3Progress{key: key}
	h.advance(b, len(b))
	return h.finish(b)
}

// advance hashes the groups of in that lie within its first filled bytes,
// except the last group of in: which group is last decides how it is
// hashed, so it waits for finish.
func (h *blake3Progress) advance(in []byte, filled int) { h.advanceOf(in, filled, len(in)) }

// advanceOf is advance for an input of total bytes of which in holds the
// first len(in) (at least filled): the input may arrive in a buffer that
// grows as it does.
func (h *blake3Progress) advanceOf(in []byte, filled, total int) {
	key, flags := h.params()
	for h.done+blake3GroupSize <= filled && h.done+blake3GroupSize < total {
		g := (*[blake3GroupSize]byte)(in[h.done:])
		cv := guts.ChainingValue(guts.CompressBuffer(g, blake3GroupSize, key, h.counter, flags))
		ht := blake3GroupHeight
		for ; h.counter&(1<<ht) != 0; ht++ {
			cv = guts.ChainingValue(guts.ParentNode(h.stack[ht], cv, key, flags))
		}
		h.stack[ht] = cv
		h.counter += blake3GroupChunks
		h.done += blake3GroupSize
	}
}

// finish hashes the rest of in, all of which has arrived, and returns the
// digest of in.
func (h *blake3Progress) finish(in []byte) Digest {
	h.advance(in, len(in))
	key, flags := h.params()
	last := in[h.done:]
	var n guts.Node
	if len(last) == blake3GroupSize {
		n = guts.CompressBuffer((*[blake3GroupSize]byte)(last), len(last), key, h.counter, flags)
	} else {
		tail := blake3Tails.Get().(*[blake3GroupSize]byte)
		copy(tail[:], last)
		clear(tail[len(last):])
		n = guts.CompressBuffer(tail, len(last), key, h.counter, flags)
		blake3Tails.Put(tail)
	}
	for ht := bits.TrailingZeros64(h.counter); ht < bits.Len64(h.counter); ht++ {
		if h.counter&(1<<ht) != 0 {
			n = guts.ParentNode(h.stack[ht], guts.ChainingValue(n), key, flags)
		}
	}
	n.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(n))
	return Digest(out[:32])
}
