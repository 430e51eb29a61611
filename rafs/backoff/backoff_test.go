package backoff

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n    int
		u    float64
		want time.Duration
	}{
		{1, 0, 50 * time.Millisecond},
		{1, 0.999999, 100*time.Millisecond - time.Microsecond/10},
		{2, 0, 100 * time.Millisecond},
		{3, 0.5, 300 * time.Millisecond},
		{6, 0, 1600 * time.Millisecond},
		{7, 0, 2500 * time.Millisecond}, // 6.4s capped at 5s
		{100, 0, 2500 * time.Millisecond},
		{0, 0, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		got := Default.Delay(tt.n, tt.u)
		if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("Delay(%d, %v): got %s, want %s", tt.n, tt.u, got, tt.want)
		}
	}
}

// Every n gives a wait within [First/2, Max), whatever the schedule.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	for _, s := range []Schedule{Default, {20 * time.Millisecond, 500 * time.Millisecond}, {time.Second, time.Second}} {
		for n := -1; n < 70; n++ {
			for _, u := range []float64{0, 0.5, 0.999} {
				if d := s.Delay(n, u); d < s.First/2 || d >= s.Max {
					t.Errorf("%+v.Delay(%d, %v) = %v, want within [%v, %v)", s, n, u, d, s.First/2, s.Max)
				}
			}
		}
	}
}
