package main

import (
	"math"
	"slices"
)

// floorSeconds is the link floor of one node: the bytes it must receive
// (need: the image's bootstrap layer plus the stored, compressed bytes
// of every distinct chunk of the files read) over its link rate in
// bit/s. No schedule finishes sooner: the node's downlink carries at
// most rate bits a second, headers aside.
func floorSeconds(need int64, rate int64) float64 {
	if rate <= 0 {
		return 0
	}
	return float64(need) * 8 / float64(rate)
}

// boundSeconds is the floor of the mode as a whole. With P2P it is the
// node floor (the origin sends the image once, at the same rate, and
// peers relay it). Registry-only and in the pull mode, the origin's link
// carries the image once per node: nodes x need over the rate.
func boundSeconds(mode string, nodes int, need, rate int64) float64 {
	f := floorSeconds(need, rate)
	if mode == modeOrigin || mode == modePull {
		return f * float64(max(nodes, 1))
	}
	return f
}

// quantile is the q-quantile (0..1) of xs by the nearest-rank method:
// the smallest x with at least q of the values at or below it. With
// few nodes p99 is the maximum, as it should be. NaN for no values.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// median is the middle value (the mean of the two middle ones for an
// even count), NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
