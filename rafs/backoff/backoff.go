// Package backoff is the one exponential backoff of the project: every
// retry loop (the registry client, the mount's backend, the scheduler
// client) takes its waits from a Schedule, so they all double the same
// way and all jitter the same way.
package backoff

import "time"

// Schedule is an exponential backoff: the wait after the n-th failure in
// a row is First doubled n-1 times, capped at Max, then jittered into
// [d/2, d) so that clients failing together do not retry together.
type Schedule struct {
	First, Max time.Duration
}

// Default is the schedule of requests to registries: 100 ms doubling to
// 5 s.
var Default = Schedule{First: 100 * time.Millisecond, Max: 5 * time.Second}

// Delay returns the wait after the n-th failure (n >= 1; less counts as
// 1) with jitter u in [0, 1), rand.Float64() outside tests.
func (s Schedule) Delay(n int, u float64) time.Duration {
	d := s.Max
	n = max(n, 1)
	if n <= 32 { // beyond that the shift would only overflow past the cap
		if f := s.First << (n - 1); f > 0 && f>>(n-1) == s.First {
			d = min(f, s.Max)
		}
	}
	half := d / 2
	return half + time.Duration(u*float64(half))
}
