package runs

import (
	"cmp"
	"fmt"
	"iter"
	"slices"

	"damselfly/rafs"
)

// Run is chunks of one blob stored one after another, and the byte range
// [Off, End) of the blob they cover: Chunks[0] starts at Off, each next
// chunk starts where the previous one ends, and the last ends at End.
// The runs this package returns hold that, except the one-chunk run of
// a chunk whose end would pass 2^64 (see Merge and Extend), whose End
// wrapped and is below Off; Check refuses such a chunk.
type Run struct {
	Blob     uint32 // the blob's index in the bootstrap
	Off, End uint64
	Chunks   []rafs.Chunk
}

// Len is the run's length in bytes, End-Off. For a run of one chunk it
// is that chunk's CompressedSize even when its End wrapped.
func (r Run) Len() uint64 { return r.End - r.Off }

// Stored returns c's stored bytes within buf, which holds the run's
// bytes [Off, End). c must be one of the run's chunks (a run from Merge,
// Extend or a successful Check): otherwise it may panic.
func (r Run) Stored(buf []byte, c rafs.Chunk) []byte {
	return buf[c.CompressedOffset-r.Off:][:c.CompressedSize]
}

// Of is the run of chunks, which the caller knows to be one (it came
// from Merge, Extend or Check, or is a tail of such a run): Blob and Off
// are the first chunk's, End is where the last one ends. Nothing is
// checked; the zero Run for no chunks. chunks is not copied.
func Of(chunks []rafs.Chunk) Run {
	if len(chunks) == 0 {
		return Run{}
	}
	first, last := chunks[0], chunks[len(chunks)-1]
	return Run{Blob: first.Blob, Off: first.CompressedOffset, End: last.CompressedOffset + uint64(last.CompressedSize), Chunks: chunks}
}

// Merge plans the requests for a batch of chunks: it sorts a copy of cs
// by blob and offset and merges each chunk into the run before it when
// it is in the same blob, starts where that run ends, and the merged run
// is at most budget bytes. A chunk bigger than budget is a run of its
// own, and so is one whose end would pass 2^64. Duplicates are kept: a
// second chunk at the offset of a non-empty one starts a new run. Every
// chunk of cs is in exactly one run; runs come in blob and offset order.
// cs is not modified, and no two runs share an array.
func Merge(cs []rafs.Chunk, budget uint64) []Run {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b rafs.Chunk) int {
		return cmp.Or(cmp.Compare(a.Blob, b.Blob), cmp.Compare(a.CompressedOffset, b.CompressedOffset))
	})
	var out []Run
	for _, c := range cs {
		off := c.CompressedOffset
		end := off + uint64(c.CompressedSize)
		if k := len(out) - 1; k >= 0 && end >= off && mergeable(out[k], c, end, budget) {
			out[k].End = end
			out[k].Chunks = append(out[k].Chunks, c)
			continue
		}
		out = append(out, Run{Blob: c.Blob, Off: off, End: end, Chunks: []rafs.Chunk{c}})
	}
	return out
}

// mergeable says whether c, ending at end (not wrapped), may join r.
func mergeable(r Run, c rafs.Chunk, end, budget uint64) bool {
	return r.Blob == c.Blob && r.End >= r.Off && r.End == c.CompressedOffset && end-r.Off <= budget
}

// Extend plans the request for one wanted chunk, head: the run of head
// and the chunks that next yields after it, in order, for as long as
// each is in head's blob, starts where the run ends, keeps the run
// within budget bytes and is not refused by stop. The first chunk that
// fails one of these ends the run (stop is asked last, only about a
// chunk that would otherwise join, so it may be costly); next is not
// read further. head is in the run even when it is bigger than budget,
// and alone when its end would pass 2^64. stop may be nil.
//
// next is typically the chunks after head in the bootstrap's chunk
// table, which lists each blob's chunks in offset order.
func Extend(head rafs.Chunk, next iter.Seq[rafs.Chunk], budget uint64, stop func(rafs.Chunk) bool) Run {
	r := Run{Blob: head.Blob, Off: head.CompressedOffset, End: head.CompressedOffset + uint64(head.CompressedSize), Chunks: []rafs.Chunk{head}}
	if r.End < r.Off {
		return r
	}
	for n := range next {
		end := n.CompressedOffset + uint64(n.CompressedSize)
		if n.Blob != r.Blob || n.CompressedOffset != r.End || end < r.End || end-r.Off > budget {
			break
		}
		if stop != nil && stop(n) {
			break
		}
		r.Chunks = append(r.Chunks, n)
		r.End = end
	}
	return r
}

// Check checks that chunks, described by someone this process does not
// trust, are a run of blob that is safe to read: every chunk in blob,
// each starting where the previous one ends (no gap, no overlap), none
// ending past 2^64, the whole within blob.CompressedSize (when that is
// known, above 0) and at most budget bytes. It returns the run (Of
// chunks), on which Len and Stored are then safe; no chunks are a
// valid, empty run. The error says what is wrong, by chunk position;
// callers wrap it in their own sentinel (fusemount/backend's ErrRange).
func Check(blob rafs.Blob, chunks []rafs.Chunk, budget uint64) (Run, error) {
	for i, c := range chunks {
		if c.Blob != blob.Index {
			return Run{}, fmt.Errorf("chunk %d (%s) is in blob %d, not %d", i, c.Digest, c.Blob, blob.Index)
		}
		if i > 0 {
			p := chunks[i-1]
			end := p.CompressedOffset + uint64(p.CompressedSize)
			if end < p.CompressedOffset {
				return Run{}, fmt.Errorf("chunk %d ends past 2^64", i-1)
			}
			if c.CompressedOffset != end {
				return Run{}, fmt.Errorf("chunk %d starts at byte %d, chunk %d ends at %d: not a contiguous run", i, c.CompressedOffset, i-1, end)
			}
		}
	}
	if len(chunks) == 0 {
		return Run{Blob: blob.Index}, nil
	}
	r := Of(chunks)
	off, n := r.Off, r.Len()
	if r.End < r.Off || (blob.CompressedSize > 0 && r.End > blob.CompressedSize) {
		return Run{}, fmt.Errorf("bytes %d+%d of a %d-byte blob", off, n, blob.CompressedSize)
	}
	if n > budget {
		return Run{}, fmt.Errorf("a run of %d bytes, the most is %d", n, budget)
	}
	return r, nil
}
