package cache

import (
	"slices"
	"testing"
)

func TestIndexOrderAndBytes(t *testing.T) {
	t.Parallel()
	d := func(i uint64) Key { return fakeDigest(i) }
	type op struct {
		kind string // add, touch, remove, pop
		i    uint64
		size int64
	}
	tests := []struct {
		name      string
		ops       []op
		wantOrder []uint64 // least recently used first
		wantBytes int64
	}{
		{"adds", []op{{"add", 1, 10}, {"add", 2, 20}, {"add", 3, 30}}, []uint64{1, 2, 3}, 60},
		{"touch moves to front", []op{{"add", 1, 10}, {"add", 2, 20}, {"touch", 1, 0}}, []uint64{2, 1}, 30},
		{"re-add updates size", []op{{"add", 1, 10}, {"add", 2, 20}, {"add", 1, 15}}, []uint64{2, 1}, 35},
		{"remove", []op{{"add", 1, 10}, {"add", 2, 20}, {"remove", 1, 0}, {"remove", 9, 0}}, []uint64{2}, 20},
		{"pop oldest", []op{{"add", 1, 10}, {"add", 2, 20}, {"add", 3, 30}, {"pop", 0, 0}}, []uint64{2, 3}, 50},
		{"pop empty", []op{{"pop", 0, 0}}, nil, 0},
		{"touch absent", []op{{"touch", 4, 0}}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newIndex()
			for n, o := range tt.ops {
				switch o.kind {
				case "add":
					x.add(d(o.i), o.size, int64(n))
				case "touch":
					x.touch(d(o.i), int64(n))
				case "remove":
					x.remove(d(o.i))
				case "pop":
					x.popOldest()
				}
			}
			var want []Key
			for _, i := range tt.wantOrder {
				want = append(want, d(i))
			}
			if got := x.keys(); !slices.Equal(got, want) {
				t.Errorf("order: got %v, want %v", got, want)
			}
			if x.bytes != tt.wantBytes {
				t.Errorf("bytes: got %d, want %d", x.bytes, tt.wantBytes)
			}
		})
	}
}

func TestIndexRebuild(t *testing.T) {
	t.Parallel()
	d := fakeDigest
	tests := []struct {
		name      string
		before    func(x *index) uint64 // fills the index, returns sinceSeq
		found     []scanned
		wantOrder []Key
		wantBytes int64
	}{
		{
			name:      "mtime order",
			before:    func(x *index) uint64 { return x.seq },
			found:     []scanned{{d(1), 10, 300}, {d(2), 20, 100}, {d(3), 30, 200}},
			wantOrder: []Key{d(2), d(3), d(1)},
			wantBytes: 60,
		},
		{
			name: "local use beats an older mtime",
			before: func(x *index) uint64 {
				x.add(d(2), 20, 500) // used here after every mtime
				return x.seq
			},
			found:     []scanned{{d(1), 10, 300}, {d(2), 20, 100}},
			wantOrder: []Key{d(1), d(2)},
			wantBytes: 30,
		},
		{
			name: "gone from the directory",
			before: func(x *index) uint64 {
				x.add(d(9), 90, 50)
				return x.seq
			},
			found:     []scanned{{d(1), 10, 300}},
			wantOrder: []Key{d(1)},
			wantBytes: 10,
		},
		{
			name: "added while scanning",
			before: func(x *index) uint64 {
				since := x.seq
				x.add(d(9), 90, 50)
				return since
			},
			found:     []scanned{{d(1), 10, 300}},
			wantOrder: []Key{d(9), d(1)},
			wantBytes: 100,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newIndex()
			since := tt.before(x)
			x.rebuild(tt.found, since)
			if got := x.keys(); !slices.Equal(got, tt.wantOrder) {
				t.Errorf("order: got %v, want %v", got, tt.wantOrder)
			}
			if x.bytes != tt.wantBytes {
				t.Errorf("bytes: got %d, want %d", x.bytes, tt.wantBytes)
			}
		})
	}
}

// BenchmarkIndexRebuild rebuilds an index of 100,000 entries from a scan,
// as every rescan does.
func BenchmarkIndexRebuild(b *testing.B) {
	found := make([]scanned, 100_000)
	for i := range found {
		found[i] = scanned{key: fakeDigest(uint64(i)), size: 1 << 20, mtime: int64(i * 7919 % 100_000)}
	}
	x := newIndex()
	x.rebuild(found, 0)
	for b.Loop() {
		x.rebuild(found, x.seq)
	}
}
