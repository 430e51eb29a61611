package fusemount

import "testing"

func TestMemoryBoundsBytes(t *testing.T) {
	t.Parallel()
	m := newMemory(100)
	for k := range uint32(10) {
		m.Add(k, make([]byte, 20))
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
	m.Add(6, make([]byte, 40))
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
		m.Add(k, make([]byte, 1<<20))
	}
	if got := m.lru.Len(); got != minEntries {
		t.Errorf("entries: got %d, want %d", got, minEntries)
	}
	if _, ok := m.Get(minEntries + 1); !ok {
		t.Error("the chunk added last is not held")
	}
}
