package scheduler

import (
	"slices"
	"testing"
)

func TestBitset(t *testing.T) {
	tests := []struct {
		name    string
		members []uint32
		absent  []uint32
	}{
		{"empty", nil, []uint32{0, 63, 64, 1 << 20}},
		{"word edges", []uint32{0, 63, 64, 127, 128}, []uint32{1, 62, 65, 129, 1000}},
		{"sparse high", []uint32{5, 100000}, []uint32{6, 99999, 100001}},
		{"duplicates", []uint32{7, 7, 7}, []uint32{8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := BitsetOf(tt.members...)
			want := slices.Compact(slices.Sorted(slices.Values(tt.members)))
			for _, m := range want {
				if !b.Has(m) {
					t.Errorf("missing %d", m)
				}
			}
			for _, m := range tt.absent {
				if b.Has(m) {
					t.Errorf("has %d", m)
				}
			}
			if b.Count() != len(want) {
				t.Errorf("Count = %d, want %d", b.Count(), len(want))
			}
			if got := b.Ordinals(nil); !slices.Equal(got, want) && len(want) > 0 {
				t.Errorf("Ordinals = %v, want %v", got, want)
			}
		})
	}
}
