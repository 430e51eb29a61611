// Package bufpool holds chunk-sized byte buffers for reuse, in size
// classes of powers of two from 64 KiB to 16 MiB, each with Slack bytes
// more, so that a chunk of a power-of-two size (a 4 MiB piece of a plain
// blob) and a record header in front of it fit its class.
//
// On the machines this project measures on, memory the process touches
// for the first time, or again after the Go runtime gave it back to the
// kernel, costs a page fault per 4 KiB page (about 11 µs each in a
// paravirtualised guest: a fresh 4 MiB buffer costs 11 ms before a byte
// of it is used), and the runtime zeroes every large allocation. The
// chunks and plain-blob pieces a peer receives, caches and passes on
// were such allocations, one per chunk; a buffer that goes back here
// when its last user is done serves the next chunk of its class with
// neither cost.
//
// The rule for a buffer from Get or Take: exactly one owner at a time,
// and Put only by the owner, once nothing (no slice of it, no goroutine)
// uses it any more. A buffer Put while still read by someone is handed
// to the next Get and overwritten under the reader: the one bug this
// package invites, so owners are few and named where they are.
package bufpool

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	minShift = 16 // the smallest class: 64 KiB
	maxShift = 24 // the largest class: 16 MiB
	classes  = maxShift - minShift + 1

	// Slack is what each class holds beyond its power of two.
	Slack = 4 << 10

	// Min and Max are the smallest and largest class sizes. A request
	// for more than Max bytes is a plain allocation, never pooled.
	Min = 1<<minShift + Slack
	Max = 1<<maxShift + Slack
)

// size is class i's capacity.
func size(i int) int { return 1<<(minShift+i) + Slack }

// poison is Poison's switch, on in test binaries.
var poison atomic.Bool

func init() { poison.Store(testing.Testing()) }

// Poison sets whether Put overwrites the buffer it is given (with 0xdb
// bytes) before keeping it, so that a use after Put reads garbage that a
// digest check or a comparison notices, instead of the right bytes by
// luck. It is on in every test binary (testing.Testing) and off
// otherwise; a benchmark of the pool itself turns it off.
func Poison(on bool) { poison.Store(on) }

// pools[i] holds buffers of capacity size(i), as *[]byte so that a Put
// allocates no interface box.
var pools [classes]sync.Pool

// class returns the index of the smallest class that holds n bytes, or
// -1 for n > Max.
func class(n int) int {
	if n > Max {
		return -1
	}
	if n <= Min {
		return 0
	}
	return bits.Len(uint(n-Slack-1)) - minShift
}

// Cap returns the capacity Get gives a buffer of n bytes: its class's
// size, or n itself above Max.
func Cap(n int) int {
	if i := class(n); i >= 0 {
		return size(i)
	}
	return n
}

// Get returns a buffer of length n (0 <= n), from the pool when one of
// its class is there, else newly allocated with capacity Cap(n). Its
// contents are unspecified. The caller owns it (see the package comment).
func Get(n int) []byte {
	if b, ok := Take(n); ok {
		return b
	}
	return make([]byte, n, Cap(n))
}

// Take is Get without the allocation: it returns a pooled buffer of
// length n, or false when its class has none (or n > Max). A reader of
// untrusted length uses it to take memory that costs nothing new, and
// grows its own otherwise.
func Take(n int) ([]byte, bool) {
	i := class(n)
	if i < 0 || n < 0 {
		return nil, false
	}
	p, _ := pools[i].Get().(*[]byte)
	if p == nil {
		return nil, false
	}
	return (*p)[:n], true
}

// Put gives b back for reuse. Only a buffer whose capacity is exactly a
// class size is kept (what Get and Cap allocate); others are left to the
// garbage collector, so an owner may Put whatever it owns. b must not
// be used after Put, by anyone.
func Put(b []byte) {
	c := cap(b)
	i := class(c)
	if i < 0 || c != size(i) {
		return
	}
	b = b[:c]
	if poison.Load() {
		for j := range b {
			b[j] = 0xdb
		}
	}
	p := new([]byte)
	*p = b
	pools[i].Put(p)
}
