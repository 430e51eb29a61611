package cache

import (
	"sync"
	"time"
)

// hot keeps the stored bytes of the entries this Cache put, or read with
// Get, most recently, up to a byte budget, so that Get and ReadChunk serve them
// without the disk. It matters with direct I/O, where every read of an
// entry file goes to the device: a peer uploads a chunk it has just
// fetched to the peers that fetch it next, within seconds, and those
// uploads would otherwise each wait for a disk read.
//
// Its buffers are recycled: once the budget is allocated, keeping a new
// entry reuses the memory of the one it displaces rather than asking the
// kernel for fresh pages (each first touch of which costs a fault).
//
// hot holds only bytes that were written to or read from the entry file
// (and passed its checks), so it never serves what the file would not.
// The Cache drops a key from it whenever it forgets the file (evicted,
// removed, found missing or corrupt); an entry deleted by another process
// stays served from here until it is displaced, which is harmless: the
// bytes are the chunk's.
type hot struct {
	budget int64 // bytes of buffers hot may allocate, live or free

	mu        sync.Mutex
	entries   map[Key]*hotEntry
	head      hotEntry // sentinel of the recency list: head.next is the newest
	allocated int64    // bytes of buffers allocated: live, free and retired
	live      int64    // bytes the entries hold
	free      [][]byte // recycled buffers, ready for reuse
}

type hotEntry struct {
	d          Key
	meta       Meta
	buf        []byte // the stored bytes; len(buf) == meta.StoredSize
	kept       time.Time
	refs       int  // readers copying from buf now
	gone       bool // dropped while read: the last reader recycles buf
	prev, next *hotEntry
}

// hotChunkLimit is the largest stored size hot keeps, as a fraction of
// its budget: a few huge chunks would otherwise displace everything.
const hotChunkLimit = 4

func newHot(budget int64) *hot {
	h := &hot{budget: budget, entries: make(map[Key]*hotEntry)}
	h.head.prev, h.head.next = &h.head, &h.head
	return h
}

// keep copies stored, d's stored bytes as m describes them, into hot,
// displacing the least recently used entries as the budget requires. It
// keeps nothing when stored is over a quarter of the budget, or when
// readers hold so much displaced memory that the budget has no room.
func (h *hot) keep(d Key, m Meta, stored []byte) {
	n := int64(len(stored))
	if h == nil || n > h.budget/hotChunkLimit {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.entries[d]; ok {
		h.unlink(e)
		h.pushFront(e)
		return
	}
	buf := h.buffer(n)
	if buf == nil {
		return
	}
	e := &hotEntry{d: d, meta: m, buf: buf[:n], kept: time.Now()}
	copy(e.buf, stored)
	h.live += n
	h.entries[d] = e
	h.pushFront(e)
}

// buffer returns a buffer of capacity at least n: a free one, or a new
// one within the budget after displacing old entries. The caller holds mu.
func (h *hot) buffer(n int64) []byte {
	for {
		for i, b := range h.free {
			if int64(cap(b)) >= n {
				last := len(h.free) - 1
				h.free[i] = h.free[last]
				h.free = h.free[:last]
				return b
			}
		}
		if h.allocated+n <= h.budget {
			h.allocated += n
			return make([]byte, n)
		}
		// Free buffers too small for n: give them back to the heap.
		if len(h.free) > 0 {
			for _, b := range h.free {
				h.allocated -= int64(cap(b))
			}
			h.free = h.free[:0]
			continue
		}
		oldest := h.head.prev
		if oldest == &h.head {
			return nil // everything is held by readers
		}
		h.drop(oldest)
	}
}

// get calls use with d's meta and stored bytes if hot holds d, and
// reports whether it did. use runs without hot's lock held, and the bytes
// stay valid only until it returns.
func (h *hot) get(d Key, use func(Meta, []byte, time.Time)) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	e, ok := h.entries[d]
	if !ok {
		h.mu.Unlock()
		return false
	}
	e.refs++
	h.unlink(e)
	h.pushFront(e)
	h.mu.Unlock()

	use(e.meta, e.buf, e.kept)

	h.mu.Lock()
	e.refs--
	if e.gone && e.refs == 0 {
		h.free = append(h.free, e.buf[:0])
	}
	h.mu.Unlock()
	return true
}

// touched records that d's file mtime was refreshed at t, so that a hit
// in hot refreshes it again only touchInterval later.
func (h *hot) touched(d Key, t time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	if e, ok := h.entries[d]; ok {
		e.kept = t
	}
	h.mu.Unlock()
}

// forget drops d, whose file is gone.
func (h *hot) forget(d Key) {
	if h == nil {
		return
	}
	h.mu.Lock()
	if e, ok := h.entries[d]; ok {
		h.drop(e)
	}
	h.mu.Unlock()
}

// drop removes e and recycles its buffer, or leaves that to its last
// reader. The caller holds mu.
func (h *hot) drop(e *hotEntry) {
	delete(h.entries, e.d)
	h.live -= int64(len(e.buf))
	h.unlink(e)
	e.gone = true
	if e.refs == 0 {
		h.free = append(h.free, e.buf[:0])
	}
}

func (h *hot) unlink(e *hotEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (h *hot) pushFront(e *hotEntry) {
	e.prev, e.next = &h.head, h.head.next
	h.head.next.prev = e
	h.head.next = e
}

// stats returns the entries hot holds and their bytes.
func (h *hot) stats() (entries int, bytes int64) {
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries), h.live
}
