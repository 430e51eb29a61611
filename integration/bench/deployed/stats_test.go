package main

import (
	"math"
	"testing"
)

func TestFloorAndBound(t *testing.T) {
	t.Parallel()
	// 25 MB at 200 Mbit/s is one second.
	const need, rate = 25_000_000, 200_000_000
	tests := []struct {
		mode  string
		nodes int
		want  float64
	}{
		{modeP2P, 1, 1}, {modeP2P, 8, 1}, {modeOrigin, 1, 1}, {modeOrigin, 4, 4}, {modeOrigin, 8, 8},
	}
	for _, tt := range tests {
		if got := boundSeconds(tt.mode, tt.nodes, need, rate); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("boundSeconds(%s, %d) = %v, want %v", tt.mode, tt.nodes, got, tt.want)
		}
	}
	if got := floorSeconds(need, rate); got != 1 {
		t.Errorf("floorSeconds = %v, want 1", got)
	}
	if got := floorSeconds(need, 0); got != 0 {
		t.Errorf("floorSeconds at rate 0 = %v, want 0", got)
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3, 8, 7, 6}
	tests := []struct {
		q    float64
		want float64
	}{{0.5, 4}, {0.99, 8}, {1, 8}, {0, 1}, {0.25, 2}}
	for _, tt := range tests {
		if got := quantile(xs, tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := quantile([]float64{3}, 0.99); got != 3 {
		t.Errorf("quantile of one = %v, want 3", got)
	}
	if !math.IsNaN(quantile(nil, 0.5)) || !math.IsNaN(median(nil)) {
		t.Error("quantile and median of none: want NaN")
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
}
