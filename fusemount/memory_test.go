package fusemount

import "testing"

func TestMemoryBoundsBytes(t *testing.T) {
	t.Parallel()
	m := newMemory(100)
	for k := range uint32(10) {
		m.Add(k, newDecoded(make([]byte, 20)))
	}
	// 100 bytes hold the last five 20-byte chunks.
	for k := range uint32(10) {
		if got, want := m.Contains(k), k >= 5; got != want {
			t.Errorf("chunk %d held: got %v, want %v", k, got, want)
		}
	}
	if m.bytes != 100 {
		t.Errorf("bytes: got %d, want 100", m.bytes)
	}
	// A chunk used last stays; replacing one counts its new size.
	m.Get(5)
	m.Add(6, newDecoded(make([]byte, 40)))
	if !m.Contains(5) || !m.Contains(6) || m.Contains(7) {
		t.Errorf("after using 5 and growing 6: held 5 %v, 6 %v, 7 %v; want true, true, false", m.Contains(5), m.Contains(6), m.Contains(7))
	}
	if m.bytes > 100 {
		t.Errorf("bytes: got %d, want at most 100", m.bytes)
	}
}

func TestMemoryKeepsMinEntries(t *testing.T) {
	t.Parallel()
	m := newMemory(10)
	for k := range uint32(minEntries + 2) {
		m.Add(k, newDecoded(make([]byte, 1<<20)))
	}
	if got := m.lru.Len(); got != minEntries {
		t.Errorf("entries: got %d, want %d", got, minEntries)
	}
	if _, ok := m.Get(minEntries + 1); !ok {
		t.Error("the chunk added last is not held")
	}
}

// memory drops its reference to a chunk when the chunk leaves, whether
// pushed out or replaced, and a reference taken with Get keeps the
// bytes alive after that.
func TestMemoryDropsWhatLeaves(t *testing.T) {
	t.Parallel()
	m := newMemory(100)
	a := newDecoded(make([]byte, 60))
	m.Add(1, a.hold())
	got, ok := m.Get(1)
	if !ok || got != a {
		t.Fatal("chunk 1 not held")
	}
	for k := range uint32(minEntries) { // over the bound: 1 leaves
		m.Add(10+k, newDecoded(make([]byte, 60)))
	}
	if m.Contains(1) {
		t.Fatal("chunk 1 still held over the bound")
	}
	if n := a.refs.Load(); n != 2 {
		t.Fatalf("chunk 1 after leaving: %d references, want 2 (the creator's and Get's)", n)
	}
	got.drop()
	a.drop()
	if a.refs.Load() != 0 || a.b != nil {
		t.Fatal("chunk 1's buffer not given back after its last reference")
	}
	// Replacing a chunk, by itself or by another, keeps one reference
	// for memory and drops the one replaced.
	b, c := newDecoded(make([]byte, 60)), newDecoded(make([]byte, 60))
	m.Add(2, b.hold())
	m.Add(2, b.hold())
	if n := b.refs.Load(); n != 2 {
		t.Fatalf("chunk 2 added twice: %d references, want 2 (the creator's and memory's)", n)
	}
	m.Add(2, c)
	if n := b.refs.Load(); n != 1 {
		t.Fatalf("chunk 2 replaced: %d references, want 1 (the creator's)", n)
	}
	b.drop()
	if b.b != nil {
		t.Fatal("the replaced buffer not given back after its last reference")
	}
}
