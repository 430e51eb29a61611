package runs

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	"damselfly/rafs"
)

// checkMerged fails t unless runs is a plan Merge may return for cs and
// budget: every chunk of cs in exactly one run; each run one blob, gap-free,
// its range its chunks', within budget unless it is one chunk; runs in
// blob and offset order; and no two runs that could have been one.
func checkMerged(t *testing.T, cs []rafs.Chunk, budget uint64, runs []Run) {
	t.Helper()
	var all []rafs.Chunk
	for i, r := range runs {
		if len(r.Chunks) == 0 {
			t.Fatalf("run %d is empty", i)
		}
		if o := Of(r.Chunks); o.Blob != r.Blob || o.Off != r.Off || o.End != r.End {
			t.Fatalf("run %d: got %s, want its chunks' range %s", i, show(r), show(o))
		}
		for j, c := range r.Chunks {
			if c.Blob != r.Blob {
				t.Fatalf("run %d: chunk %d is in blob %d, not %d", i, j, c.Blob, r.Blob)
			}
			if j > 0 {
				p := r.Chunks[j-1]
				if end := p.CompressedOffset + uint64(p.CompressedSize); end < p.CompressedOffset || c.CompressedOffset != end {
					t.Fatalf("run %d: chunk %d does not follow chunk %d: %s", i, j, j-1, show(r))
				}
			}
		}
		if len(r.Chunks) > 1 && (r.End < r.Off || r.Len() > budget) {
			t.Fatalf("run %d: %s is over the budget %d", i, show(r), budget)
		}
		if i > 0 {
			p := runs[i-1]
			if cmp.Or(cmp.Compare(p.Blob, r.Blob), cmp.Compare(p.Off, r.Off)) > 0 {
				t.Fatalf("runs %d and %d out of order: %s", i-1, i, show(p, r))
			}
			h := r.Chunks[0]
			if end := h.CompressedOffset + uint64(h.CompressedSize); mergeable(p, h, end, budget) && end >= h.CompressedOffset {
				t.Fatalf("runs %d and %d could be one: %s", i-1, i, show(p, r))
			}
		}
		all = append(all, r.Chunks...)
	}
	order := func(a, b rafs.Chunk) int {
		return cmp.Or(cmp.Compare(a.Blob, b.Blob), cmp.Compare(a.CompressedOffset, b.CompressedOffset),
			cmp.Compare(a.CompressedSize, b.CompressedSize), cmp.Compare(a.Ordinal, b.Ordinal))
	}
	want := slices.SortedFunc(slices.Values(cs), order)
	slices.SortFunc(all, order)
	if !slices.Equal(all, want) {
		t.Fatalf("the runs hold %d chunks, not the %d given", len(all), len(want))
	}
}

// legacyMerge is peer/fetch's originRuns as it was before this package,
// kept as the oracle for Merge: for chunks of one blob whose offsets
// fit an int64, Merge must plan exactly the same runs.
func legacyMerge(cs []rafs.Chunk, maxRange int64) []Run {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b rafs.Chunk) int {
		switch {
		case a.CompressedOffset < b.CompressedOffset:
			return -1
		case a.CompressedOffset > b.CompressedOffset:
			return 1
		}
		return 0
	})
	type originRun struct {
		off, end int64
		chunks   []rafs.Chunk
	}
	var out []originRun
	for _, c := range cs {
		off := int64(c.CompressedOffset)
		end := off + int64(c.CompressedSize)
		if k := len(out) - 1; k >= 0 && out[k].end == off && end-out[k].off <= maxRange {
			out[k].end = end
			out[k].chunks = append(out[k].chunks, c)
			continue
		}
		out = append(out, originRun{off: off, end: end, chunks: []rafs.Chunk{c}})
	}
	var runs []Run
	for _, r := range out {
		runs = append(runs, Run{Blob: r.chunks[0].Blob, Off: uint64(r.off), End: uint64(r.end), Chunks: r.chunks})
	}
	return runs
}

// chunksOf decodes fuzz bytes into chunks, 4 bytes each, laid out one
// after another so that adjacency is common: byte 0 picks the blob (bit
// 0) and where the chunk starts (bits 1-2: right after the previous
// one, after a gap of byte 3, byte 3 back from the previous end, or
// near 2^64); bytes 1-2 are the size.
func chunksOf(data []byte) []rafs.Chunk {
	var cs []rafs.Chunk
	var end uint64
	for i := 0; i+4 <= len(data) && len(cs) < 64; i += 4 {
		b := data[i : i+4]
		off := end
		switch b[0] >> 1 & 3 {
		case 1:
			off += uint64(b[3])
		case 2:
			off -= min(end, uint64(b[3]))
		case 3:
			off = math.MaxUint64 - uint64(b[3])<<8
		}
		c := rafs.Chunk{Blob: uint32(b[0] & 1), Ordinal: uint32(len(cs)), CompressedOffset: off, CompressedSize: uint32(binary.LittleEndian.Uint16(b[1:]))}
		cs = append(cs, c)
		end = off + uint64(c.CompressedSize)
	}
	return cs
}

// FuzzMerge: Merge keeps its invariants (checkMerged) for any chunks,
// and plans what originRuns planned wherever that was defined.
func FuzzMerge(f *testing.F) {
	f.Add([]byte{0, 100, 0, 0, 0, 100, 0, 0, 2, 100, 0, 5}, uint16(300))
	f.Add([]byte{0, 100, 0, 0, 4, 100, 0, 50, 5, 100, 0, 0, 0, 232, 3, 0}, uint16(1000))
	f.Add([]byte{6, 100, 0, 1, 0, 100, 0, 0, 6, 0, 1, 0, 0, 255, 255, 0}, uint16(0))
	f.Add([]byte{}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, budget uint16) {
		cs := chunksOf(data)
		got := Merge(cs, uint64(budget))
		checkMerged(t, cs, uint64(budget), got)
		for _, c := range cs {
			if c.Blob != 0 || c.CompressedOffset > math.MaxInt64/2 {
				return
			}
		}
		if want := legacyMerge(cs, int64(budget)); show(got...) != show(want...) {
			t.Fatalf("got %s, want what originRuns planned: %s", show(got...), show(want...))
		}
	})
}

// legacyCheck is fusemount/backend's checkRun as it was before this
// package, without its ErrRange prefix, kept as the oracle for Check.
func legacyCheck(blob rafs.Blob, chunks []rafs.Chunk, maxRunBytes uint64) error {
	for i, c := range chunks {
		if c.Blob != blob.Index {
			return fmt.Errorf("chunk %d (%s) is in blob %d, not %d", i, c.Digest, c.Blob, blob.Index)
		}
		if i > 0 {
			p := chunks[i-1]
			end := p.CompressedOffset + uint64(p.CompressedSize)
			if end < p.CompressedOffset {
				return fmt.Errorf("chunk %d ends past 2^64", i-1)
			}
			if c.CompressedOffset != end {
				return fmt.Errorf("chunk %d starts at byte %d, chunk %d ends at %d: not a contiguous run", i, c.CompressedOffset, i-1, end)
			}
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	first, last := chunks[0], chunks[len(chunks)-1]
	off, n := first.CompressedOffset, last.CompressedOffset+uint64(last.CompressedSize)-first.CompressedOffset
	if end := off + n; end < off || (blob.CompressedSize > 0 && end > blob.CompressedSize) {
		return fmt.Errorf("bytes %d+%d of a %d-byte blob", off, n, blob.CompressedSize)
	}
	if n > maxRunBytes {
		return fmt.Errorf("a run of %d bytes, the most is %d", n, maxRunBytes)
	}
	return nil
}

// FuzzCheck: whatever run a hostile bootstrap or request describes,
// Check either refuses it or every chunk's slice lies inside the run's
// range, within the blob and the budget; and it decides, and says why,
// as fusemount/backend's checkRun did.
func FuzzCheck(f *testing.F) {
	// checkRun's seeds, then the table's edges.
	f.Add(uint64(0), uint32(10), uint64(10), uint32(5), uint64(100), uint32(0), uint64(64<<20))
	f.Add(uint64(5), uint32(10), uint64(20), uint32(5), uint64(0), uint32(1), uint64(64<<20))
	f.Add(^uint64(0)-3, uint32(10), uint64(6), uint32(5), uint64(0), uint32(0), uint64(64<<20))
	f.Add(^uint64(0)-19, uint32(10), ^uint64(0)-9, uint32(10), uint64(0), uint32(0), ^uint64(0))
	f.Add(uint64(900), uint32(50), uint64(950), uint32(51), uint64(1000), uint32(0), uint64(500))
	f.Add(uint64(0), uint32(100), uint64(100), uint32(100), uint64(0), uint32(0), uint64(199))
	f.Fuzz(func(t *testing.T, off0 uint64, size0 uint32, off1 uint64, size1 uint32, blobSize uint64, blobIdx uint32, budget uint64) {
		blob := rafs.Blob{Index: 0, CompressedSize: blobSize}
		chunks := []rafs.Chunk{
			{Blob: 0, CompressedOffset: off0, CompressedSize: size0},
			{Blob: blobIdx, CompressedOffset: off1, CompressedSize: size1},
		}
		for n := range len(chunks) + 1 {
			chunks := chunks[:n]
			r, err := Check(blob, chunks, budget)
			want := legacyCheck(blob, chunks, budget)
			if fmt.Sprint(err) != fmt.Sprint(want) {
				t.Fatalf("%d chunks: got error %v, want %v", n, err, want)
			}
			if err != nil {
				continue
			}
			if r.End < r.Off || r.Len() > budget || (blobSize > 0 && r.End > blobSize) {
				t.Fatalf("accepted a run of %d+%d in a %d-byte blob, budget %d", r.Off, r.Len(), blobSize, budget)
			}
			buf := make([]byte, min(r.Len(), 1<<16))
			for _, c := range chunks {
				if c.CompressedOffset < r.Off || c.CompressedOffset-r.Off+uint64(c.CompressedSize) > r.Len() {
					t.Fatalf("chunk %d+%d outside the run %d+%d", c.CompressedOffset, c.CompressedSize, r.Off, r.Len())
				}
				if uint64(len(buf)) == r.Len() && len(r.Stored(buf, c)) != int(c.CompressedSize) {
					t.Fatalf("chunk %d+%d: a slice of %d bytes", c.CompressedOffset, c.CompressedSize, len(r.Stored(buf, c)))
				}
			}
		}
	})
}
