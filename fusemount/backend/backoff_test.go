package backend

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
		got := backoff(tt.n, tt.u)
		if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("backoff(%d, %v): got %s, want %s", tt.n, tt.u, got, tt.want)
		}
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		n                     int
		serverWait, remaining time.Duration
		want                  time.Duration
	}{
		{"backoff", 2, 0, time.Minute, 100 * time.Millisecond},
		{"retry-after is longer", 2, 3 * time.Second, time.Minute, 3 * time.Second},
		{"retry-after is shorter", 8, time.Second, time.Minute, 2500 * time.Millisecond},
		{"capped by the deadline", 8, time.Hour, 40 * time.Millisecond, 40 * time.Millisecond},
		{"deadline passed", 1, 0, -time.Second, 0},
	}
	for _, tt := range tests {
		if got := wait(tt.n, 0, tt.serverWait, tt.remaining); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}
