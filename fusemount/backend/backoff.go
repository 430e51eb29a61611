package backend

import "time"

// Clock is the time source of the retry loop and the proxy health
// checker, injected so tests can run a three-minute deadline instantly.
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
	// After sends the time once d has passed, like time.After.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// The backoff schedule: 100ms doubling to 5s.
const (
	backoffBase = 100 * time.Millisecond
	backoffMax  = 5 * time.Second
)

// backoff returns the wait after the n-th transient failure of a read
// (n >= 1): backoffBase doubled n-1 times, capped at backoffMax, then
// scaled by jitter u in [0, 1) into [d/2, d) so that readers failing
// together do not retry together.
func backoff(n int, u float64) time.Duration {
	d := backoffMax
	if n < 1 {
		n = 1
	}
	if n <= 16 { // beyond that the shift would only overflow past the cap
		d = min(backoffBase<<(n-1), backoffMax)
	}
	half := d / 2
	return half + time.Duration(u*float64(half))
}

// wait returns how long to sleep before the next attempt: the backoff,
// or longer if the server asked for it with Retry-After, but never past
// the deadline, which is remaining away.
func wait(n int, u float64, serverWait, remaining time.Duration) time.Duration {
	d := max(backoff(n, u), serverWait)
	return max(0, min(d, remaining))
}
