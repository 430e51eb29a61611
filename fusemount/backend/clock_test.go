package backend

import (
	"testing"
	"time"
)

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
