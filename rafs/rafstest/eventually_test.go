package rafstest

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyReturnsWhenTheConditionHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	start := time.Now()
	Eventually(t, 10*time.Second, "the third call", func() bool { return calls.Add(1) >= 3 })
	if n := calls.Load(); n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s for a condition true on the third try", d)
	}
}

// recorder is a testing.TB whose Fatalf records instead of ending the
// test, so the failure path can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func TestEventuallyFailsAfterTheLimit(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if v := recover(); v != r {
				t.Fatalf("recovered %v, want the recorder's Fatalf", v)
			}
		}()
		Eventually(r, 100*time.Millisecond, "never", func() bool { return false })
	}()
	if r.failed == "" {
		t.Fatal("Eventually returned without failing for a condition that never holds")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Errorf("failed after %s, want about 100ms", d)
	}
}
