package fusemount

import (
	"math"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// memory holds decoded chunks by chunk index, least recently used out
// first, bounded by their bytes: chunks are as small as the files they
// hold (a Debian tree averages 174 KiB in 1 MiB chunks), so a bound in
// chunks of the image's chunk size kept a sixth of MemoryBytes, and
// chunks that runs and readahead fetched ahead of their readers fell out
// before they were read, to be decoded again from the node cache. It
// always keeps the last minEntries chunks, however big. It holds one
// reference to each chunk it keeps, dropped when the chunk leaves. Safe
// for concurrent use.
type memory struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[uint32, *decoded]
	bytes int64 // of the chunks held
	max   int64
}

// minEntries is how many chunks memory keeps even past its bound.
const minEntries = 4

func newMemory(maxBytes int64) *memory {
	m := &memory{max: maxBytes}
	// Unbounded in count: Add evicts by bytes. NewLRU fails only for a
	// size <= 0.
	m.lru, _ = simplelru.NewLRU[uint32, *decoded](math.MaxInt, func(_ uint32, v *decoded) {
		m.bytes -= int64(len(v.b))
		v.drop()
	})
	return m
}

// Get returns the chunk, with a reference the caller drops, and marks it
// used.
func (m *memory) Get(k uint32) (*decoded, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.lru.Get(k)
	if !ok {
		return nil, false
	}
	return v.hold(), true
}

// Contains reports whether the chunk is held, without marking it used.
func (m *memory) Contains(k uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Contains(k)
}

// Add keeps v as chunk k, taking over the caller's reference to it, then
// drops the least recently used chunks while more than max bytes are
// held.
func (m *memory) Add(k uint32, v *decoded) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.lru.Peek(k)
	if had {
		m.bytes -= int64(len(old.b))
	}
	m.lru.Add(k, v) // a replaced value is not evicted: dropped below
	m.bytes += int64(len(v.b))
	if had {
		old.drop()
	}
	for m.bytes > m.max && m.lru.Len() > minEntries {
		m.lru.RemoveOldest()
	}
}
