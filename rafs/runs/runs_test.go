package runs

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"damselfly/rafs"
)

// ck is a chunk of blob b at [off, off+size), named by ordinal n.
func ck(b uint32, n uint32, off uint64, size uint32) rafs.Chunk {
	return rafs.Chunk{Blob: b, Ordinal: n, Index: n, CompressedOffset: off, CompressedSize: size}
}

// show writes runs as "b0[0,300):0,1,2 ..." (blob, range, ordinals).
func show(rs ...Run) string {
	var parts []string
	for _, r := range rs {
		var ords []string
		for _, c := range r.Chunks {
			ords = append(ords, fmt.Sprint(c.Ordinal))
		}
		parts = append(parts, fmt.Sprintf("b%d[%d,%d):%s", r.Blob, r.Off, r.End, strings.Join(ords, ",")))
	}
	return strings.Join(parts, " ")
}

const top = math.MaxUint64

func TestMerge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cs     []rafs.Chunk
		budget uint64
		want   string
	}{
		{"empty", nil, 300, ""},
		{"one", []rafs.Chunk{ck(0, 0, 0, 100)}, 300, "b0[0,100):0"},
		// The case peer/fetch's originRuns was pinned by.
		{"unsorted, gap, bigger than budget", []rafs.Chunk{
			ck(0, 2, 200, 100), ck(0, 0, 0, 100), ck(0, 1, 100, 100),
			ck(0, 4, 500, 100), ck(0, 5, 600, 1000),
		}, 300, "b0[0,300):0,1,2 b0[500,600):4 b0[600,1600):5"},
		{"budget reached exactly", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100), ck(0, 2, 200, 100), ck(0, 3, 300, 100)}, 300,
			"b0[0,300):0,1,2 b0[300,400):3"},
		{"budget one byte short", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, 199, "b0[0,100):0 b0[100,200):1"},
		{"budget zero", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, 0, "b0[0,100):0 b0[100,200):1"},
		{"duplicates", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, 300,
			"b0[0,100):0 b0[0,200):0,1"},
		{"overlap", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 50, 100)}, 300, "b0[0,100):0 b0[50,150):1"},
		{"gap of one byte", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 101, 100)}, 300, "b0[0,100):0 b0[101,201):1"},
		{"different blobs at adjacent offsets", []rafs.Chunk{ck(1, 1, 100, 100), ck(0, 0, 0, 100), ck(1, 2, 200, 100)}, 300,
			"b0[0,100):0 b1[100,300):1,2"},
		{"big chunk between small ones", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 1000), ck(0, 2, 1100, 100)}, 300,
			"b0[0,100):0 b0[100,1100):1 b0[1100,1200):2"},
		{"zero-size chunks", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 0), ck(0, 2, 100, 100)}, 200,
			"b0[0,200):0,1,2"},
		{"to 2^64-1", []rafs.Chunk{ck(0, 0, top-200, 100), ck(0, 1, top-100, 100)}, 300,
			fmt.Sprintf("b0[%d,%d):0,1", uint64(top-200), uint64(top))},
		{"end past 2^64 alone", []rafs.Chunk{ck(0, 0, top-99, 100), ck(0, 1, top-199, 100), ck(0, 2, 0, 10)}, 300,
			// Sorted: 2 at 0, 1 at top-199, 0 at top-99 whose end wraps
			// to 0: it must not join 1, nor anything join it.
			fmt.Sprintf("b0[0,10):2 b0[%d,%d):1 b0[%d,0):0", uint64(top-199), uint64(top-99), uint64(top-99))},
		{"budget max", []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, top, "b0[0,200):0,1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := slices.Clone(tt.cs)
			got := Merge(tt.cs, tt.budget)
			if s := show(got...); s != tt.want {
				t.Errorf("got %s, want %s", s, tt.want)
			}
			if !slices.Equal(in, tt.cs) {
				t.Errorf("Merge modified its input")
			}
			checkMerged(t, tt.cs, tt.budget, got)
		})
	}
}

func TestMergeRunsDoNotShare(t *testing.T) {
	t.Parallel()
	got := Merge([]rafs.Chunk{ck(0, 0, 0, 10), ck(0, 1, 20, 10), ck(0, 2, 30, 10)}, 100)
	got[0].Chunks = append(got[0].Chunks, ck(9, 9, 9, 9))
	if s := show(got[1]); s != "b0[20,40):1,2" {
		t.Errorf("appending to run 0 changed run 1: got %s, want b0[20,40):1,2", s)
	}
}

// table yields the chunks of cs from index i on, as a bootstrap's chunk
// table does, and counts the chunks read.
func table(cs []rafs.Chunk, i int, read *int) func(func(rafs.Chunk) bool) {
	return func(yield func(rafs.Chunk) bool) {
		for ; i < len(cs); i++ {
			*read++
			if !yield(cs[i]) {
				return
			}
		}
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	// blob 0: 0-4 adjacent 100-byte chunks, 5 after a gap, 6 big;
	// blob 1: 7 right where blob 0's 6 ends.
	tbl := []rafs.Chunk{
		ck(0, 0, 0, 100), ck(0, 1, 100, 100), ck(0, 2, 200, 100), ck(0, 3, 300, 100), ck(0, 4, 400, 100),
		ck(0, 5, 600, 100), ck(0, 6, 700, 1000), ck(1, 7, 1700, 100),
	}
	stopAt := func(ords ...uint32) func(rafs.Chunk) bool {
		return func(c rafs.Chunk) bool { return slices.Contains(ords, c.Ordinal) }
	}
	tests := []struct {
		name     string
		head     int
		budget   uint64
		stop     func(rafs.Chunk) bool
		want     string
		wantRead int // chunks read from the table
	}{
		{"to the budget", 0, 300, nil, "b0[0,300):0,1,2", 3},
		{"budget not a multiple", 0, 350, nil, "b0[0,300):0,1,2", 3},
		{"to the gap", 2, 1000, nil, "b0[200,500):2,3,4", 3},
		{"stop predicate", 0, 1000, stopAt(3), "b0[0,300):0,1,2", 3},
		{"stop on the first", 0, 1000, stopAt(1), "b0[0,100):0", 1},
		{"stop not asked past the budget", 0, 200, stopAt(2), "b0[0,200):0,1", 2},
		{"head bigger than budget", 6, 500, nil, "b0[700,1700):6", 1},
		{"next blob adjacent", 6, 5000, nil, "b0[700,1700):6", 1},
		{"last of the table", 7, 5000, nil, "b1[1700,1800):7", 0},
		{"budget zero", 0, 0, nil, "b0[0,100):0", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			read := 0
			got := Extend(tbl[tt.head], table(tbl, tt.head+1, &read), tt.budget, tt.stop)
			if s := show(got); s != tt.want {
				t.Errorf("got %s, want %s", s, tt.want)
			}
			if read != tt.wantRead {
				t.Errorf("read %d chunks of the table, want %d", read, tt.wantRead)
			}
			if o := Of(got.Chunks); show(o) != show(got) {
				t.Errorf("Of the run: got %s, want %s", show(o), show(got))
			}
		})
	}
}

func TestExtendOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tbl  []rafs.Chunk
		want string
	}{
		{"to 2^64-1", []rafs.Chunk{ck(0, 0, top-200, 100), ck(0, 1, top-100, 100)},
			fmt.Sprintf("b0[%d,%d):0,1", uint64(top-200), uint64(top))},
		{"head wraps", []rafs.Chunk{ck(0, 0, top-49, 100), ck(0, 1, 50, 100)},
			fmt.Sprintf("b0[%d,50):0", uint64(top-49))},
		{"next wraps", []rafs.Chunk{ck(0, 0, top-199, 100), ck(0, 1, top-99, 200)},
			fmt.Sprintf("b0[%d,%d):0", uint64(top-199), uint64(top-99))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			read := 0
			got := Extend(tt.tbl[0], table(tt.tbl, 1, &read), top, nil)
			if s := show(got); s != tt.want {
				t.Errorf("got %s, want %s", s, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	blob := rafs.Blob{Index: 0, CompressedSize: 1000}
	unknown := rafs.Blob{Index: 0}
	tests := []struct {
		name    string
		blob    rafs.Blob
		chunks  []rafs.Chunk
		budget  uint64
		want    string // the run, or the error
		wantErr bool
	}{
		{"empty", blob, nil, 100, "b0[0,0):", false},
		{"one", blob, []rafs.Chunk{ck(0, 0, 100, 100)}, 500, "b0[100,200):0", false},
		{"contiguous", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, 500, "b0[0,200):0,1", false},
		{"to the blob's end", blob, []rafs.Chunk{ck(0, 0, 900, 100)}, 500, "b0[900,1000):0", false},
		{"at the budget", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, 200, "b0[0,200):0,1", false},
		{"size unknown", unknown, []rafs.Chunk{ck(0, 0, 5000, 100)}, 500, "b0[5000,5100):0", false},
		{"other blob", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(1, 1, 100, 100)}, 500,
			"chunk 1 (" + rafs.Digest{}.String() + ") is in blob 1, not 0", true},
		{"gap", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 101, 100)}, 500,
			"chunk 1 starts at byte 101, chunk 0 ends at 100: not a contiguous run", true},
		{"overlap", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 99, 100)}, 500,
			"chunk 1 starts at byte 99, chunk 0 ends at 100: not a contiguous run", true},
		{"unsorted", blob, []rafs.Chunk{ck(0, 1, 100, 100), ck(0, 0, 0, 100)}, 500,
			"chunk 1 starts at byte 0, chunk 0 ends at 200: not a contiguous run", true},
		{"duplicate", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 0, 0, 100)}, 500,
			"chunk 1 starts at byte 0, chunk 0 ends at 100: not a contiguous run", true},
		{"past the blob's end", blob, []rafs.Chunk{ck(0, 0, 900, 101)}, 500, "bytes 900+101 of a 1000-byte blob", true},
		{"over the budget", blob, []rafs.Chunk{ck(0, 0, 0, 100), ck(0, 1, 100, 100)}, 199, "a run of 200 bytes, the most is 199", true},
		{"chunk bigger than budget", unknown, []rafs.Chunk{ck(0, 0, 0, 1000)}, 999, "a run of 1000 bytes, the most is 999", true},
		{"middle chunk ends past 2^64", unknown, []rafs.Chunk{ck(0, 0, top-9, 20), ck(0, 1, 10, 10)}, top, "chunk 0 ends past 2^64", true},
		{"run ends past 2^64", unknown, []rafs.Chunk{ck(0, 0, top-9, 5), ck(0, 1, top-4, 10)}, top,
			fmt.Sprintf("bytes %d+15 of a 0-byte blob", uint64(top-9)), true},
		{"ends at 2^64-1", unknown, []rafs.Chunk{ck(0, 0, top-10, 10)}, top, fmt.Sprintf("b0[%d,%d):0", uint64(top-10), uint64(top)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Check(tt.blob, tt.chunks, tt.budget)
			switch {
			case tt.wantErr && err == nil:
				t.Fatalf("got run %s, want error %q", show(got), tt.want)
			case tt.wantErr && err.Error() != tt.want:
				t.Fatalf("got error %q, want %q", err, tt.want)
			case !tt.wantErr && err != nil:
				t.Fatalf("got error %v, want run %s", err, tt.want)
			case !tt.wantErr && show(got) != tt.want:
				t.Fatalf("got run %s, want %s", show(got), tt.want)
			}
		})
	}
}

func TestStored(t *testing.T) {
	t.Parallel()
	r := Of([]rafs.Chunk{ck(0, 0, 100, 3), ck(0, 1, 103, 2), ck(0, 2, 105, 4)})
	buf := []byte("aaabbcccc")
	if r.Len() != uint64(len(buf)) {
		t.Fatalf("got length %d, want %d", r.Len(), len(buf))
	}
	for i, want := range []string{"aaa", "bb", "cccc"} {
		if got := string(r.Stored(buf, r.Chunks[i])); got != want {
			t.Errorf("chunk %d: got %q, want %q", i, got, want)
		}
	}
	if o := Of(nil); o.Len() != 0 || o.Chunks != nil {
		t.Errorf("Of(nil): got %s, want the zero Run", show(o))
	}
}
