package proxy

import "testing"

func TestParseRange(t *testing.T) {
	t.Parallel()
	const size = 1000
	for _, tc := range []struct {
		h        string
		off, end int64
		ok       bool
	}{
		{"bytes=0-0", 0, 1, true},
		{"bytes=10-19", 10, 20, true},
		{"bytes=990-5000", 990, 1000, true},
		{"bytes=500-", 500, 1000, true},
		{"bytes=-10", 990, 1000, true},
		{"bytes=-5000", 0, 1000, true},
		{"bytes=1000-", 0, 0, false},
		{"bytes=20-10", 0, 0, false},
		{"bytes=0-1,5-6", 0, 0, false},
		{"bytes=-0", 0, 0, false},
		{"items=0-1", 0, 0, false},
		{"bytes=x-1", 0, 0, false},
		{"bytes=5", 0, 0, false},
	} {
		off, end, ok := parseRange(tc.h, size)
		if ok != tc.ok || ok && (off != tc.off || end != tc.end) {
			t.Errorf("parseRange(%q) = %d, %d, %v; want %d, %d, %v", tc.h, off, end, ok, tc.off, tc.end, tc.ok)
		}
	}
}
