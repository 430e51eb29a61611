package rafstest

import (
	"testing"
	"time"
)

// Eventually waits until cond holds, failing the test with what it waited
// for if it does not within limit (the test's own deadline, if sooner,
// ends the wait too). cond is tried at once, then after 1 ms, with the
// pause doubling up to 50 ms: a condition that turns true fast is seen
// fast, and a slow one costs little CPU. It is the one polling helper of
// the project's tests; prefer waiting on a channel or testing/synctest
// where the code under test offers one.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := d.Deadline(); ok && td.Before(deadline) {
			deadline = td
		}
	}
	pause := time.Millisecond
	for !cond() {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, 50*time.Millisecond)
	}
}
