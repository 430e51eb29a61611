package rafs

import (
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
//
// The tree is BLAKE3's: 1 KiB chunks are the leaves, and every subtree
// is as large a power of two of chunks as fits, left to right. The input
// is hashed 16 chunks at a time; each full group is a complete subtree of
// height 4, merged into a stack by height the way a binary counter
// carries; the last group (1 byte to 16 KiB) is the rightmost subtree, and
// the stack folds onto it from the top down.
func blake3Sum(b []byte) Digest {
	if len(b) <= guts.ChunkSize {
		return blake3.Sum256(b) // one chunk: no tree, no goroutines
	}
	key := &guts.IV
	var stack [64][8]uint32 // stack[h]: a subtree of height h, if counter's bit h is set
	var counter uint64      // chunks hashed into the stack
	for len(b) > blake3GroupSize {
		cv := guts.ChainingValue(guts.CompressBuffer((*[blake3GroupSize]byte)(b), blake3GroupSize, key, counter, 0))
		h := blake3GroupHeight
		for ; counter&(1<<h) != 0; h++ {
			cv = guts.ChainingValue(guts.ParentNode(stack[h], cv, key, 0))
		}
		stack[h] = cv
		counter += blake3GroupChunks
		b = b[blake3GroupSize:]
	}
	var n guts.Node
	if len(b) == blake3GroupSize {
		n = guts.CompressBuffer((*[blake3GroupSize]byte)(b), len(b), key, counter, 0)
	} else {
		tail := blake3Tails.Get().(*[blake3GroupSize]byte)
		copy(tail[:], b)
		clear(tail[len(b):])
		n = guts.CompressBuffer(tail, len(b), key, counter, 0)
		blake3Tails.Put(tail)
	}
	for h := bits.TrailingZeros64(counter); h < bits.Len64(counter); h++ {
		if counter&(1<<h) != 0 {
			n = guts.ParentNode(stack[h], guts.ChainingValue(n), key, 0)
		}
	}
	n.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(n))
	return Digest(out[:32])
}
