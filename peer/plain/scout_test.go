package plain

import (
	"testing"

	"damselfly/rafs"
)

func TestFrontier(t *testing.T) {
	d := rafs.Digest{1}
	for _, c := range []struct {
		name  string
		known []int
		n     int
		want  int
		ok    bool
	}{
		{"nothing known", nil, 8, 0, true},
		{"a prefix", []int{0, 1, 2}, 8, 3, true},
		{"ahead of a gap", []int{0, 5}, 8, 6, true},
		{"the end known, a gap before", []int{0, 6, 7}, 8, 1, true},
		{"all known", []int{0, 1, 2, 3}, 4, 0, false},
	} {
		lv := newLive(rafs.Digest{9}, int64(c.n)*16, 16)
		for _, i := range c.known {
			lv.digests[i] = d
		}
		got, ok := lv.frontier()
		if got != c.want || ok != c.ok {
			t.Errorf("%s: frontier %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
