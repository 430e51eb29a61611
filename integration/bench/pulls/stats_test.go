package main

import (
	"math"
	"testing"
)

func TestFloorAndBound(t *testing.T) {
	t.Parallel()
	// 25 MB at 200 Mbit/s is 1 s per node.
	if got := floorSeconds(25_000_000, 200_000_000); got != 1 {
		t.Errorf("floorSeconds: got %v, want 1", got)
	}
	if got := boundSeconds(modeP2P, 8, 25_000_000, 200_000_000); got != 1 {
		t.Errorf("p2p bound: got %v, want 1", got)
	}
	if got := boundSeconds(modeOrigin, 8, 25_000_000, 200_000_000); got != 8 {
		t.Errorf("origin bound: got %v, want 8", got)
	}
	if got := floorSeconds(1, 0); got != 0 {
		t.Errorf("floorSeconds at rate 0: got %v, want 0", got)
	}
}

func TestQuantileMedianMean(t *testing.T) {
	t.Parallel()
	xs := []float64{4, 1, 3, 2}
	tests := []struct {
		name      string
		got, want float64
	}{
		{"p50", quantile(xs, 0.5), 2},
		{"p99", quantile(xs, 0.99), 4},
		{"max", quantile(xs, 1), 4},
		{"min", quantile(xs, 0), 1},
		{"median even", median(xs), 2.5},
		{"median odd", median([]float64{3, 1, 2}), 2},
		{"mean", mean(xs), 2.5},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if !math.IsNaN(quantile(nil, 0.5)) || !math.IsNaN(median(nil)) || !math.IsNaN(mean(nil)) {
		t.Error("no values: want NaN")
	}
	if xs[0] != 4 {
		t.Error("quantile sorted its argument")
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	if got, err := parseRate("200m"); err != nil || got != 200_000_000 {
		t.Errorf("parseRate(200m): got %v, %v, want 200000000", got, err)
	}
	if _, err := parseRate("fast"); err == nil {
		t.Error("parseRate(fast): want an error")
	}
	if got, err := parseInts("1, 4,8"); err != nil || len(got) != 3 || got[2] != 8 {
		t.Errorf("parseInts: got %v, %v, want [1 4 8]", got, err)
	}
	for _, bad := range []string{"", "0", "x", "201"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q): want an error", bad)
		}
	}
}
