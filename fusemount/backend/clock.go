package backend

import (
	"time"

	"damselfly/rafs/backoff"
)

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

// backoffMax is the longest backoff between two attempts of a read.
var backoffMax = backoff.Default.Max

// wait returns how long to sleep before the next attempt: the project's
// backoff after n transient failures (jitter u in [0, 1)), or longer if
// the server asked for it with Retry-After, but never past the deadline,
// which is remaining away.
func wait(n int, u float64, serverWait, remaining time.Duration) time.Duration {
	d := max(backoff.Default.Delay(n, u), serverWait)
	return max(0, min(d, remaining))
}
