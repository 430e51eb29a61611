package fusemount

import (
	"sync/atomic"

	"damselfly/rafs/bufpool"
)

// decoded is a chunk's verified decoded bytes, shared by whoever holds a
// reference: memory, a flight's result, a read whose reply the kernel
// has not taken yet. The bytes are never written once made; the buffer
// goes back to rafs/bufpool when the last reference is dropped, so that
// the next chunk decodes into memory already touched (on the benchmark
// machine a new buffer's page faults and zeroing were a tenth of the
// mount daemon's CPU). Every reference is dropped exactly once.
type decoded struct {
	b    []byte
	refs atomic.Int32
}

// newDecoded wraps b, which nobody else references, with one reference:
// the caller's.
func newDecoded(b []byte) *decoded {
	d := &decoded{b: b}
	d.refs.Store(1)
	return d
}

// hold adds a reference and returns d.
func (d *decoded) hold() *decoded {
	if d.refs.Add(1) <= 1 {
		panic("fusemount: hold of a dropped chunk buffer")
	}
	return d
}

// drop gives back a reference; the last one returns the buffer.
func (d *decoded) drop() {
	switch n := d.refs.Add(-1); {
	case n == 0:
		bufpool.Put(d.b)
		d.b = nil
	case n < 0:
		panic("fusemount: chunk buffer dropped once too often")
	}
}
