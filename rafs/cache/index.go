package cache

import (
	"bytes"
	"cmp"
	"math"
	"slices"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// index is one process's view of the cache directory: every entry it put,
// read or scanned, in least recently used order, with the bytes their files
// take. It is not safe for concurrent use; Cache.mu guards it.
type index struct {
	lru   *simplelru.LRU[Key, *indexEntry]
	bytes int64
	seq   uint64 // bumped by every add; see rebuild
	gen   uint64 // bumped by every rebuild, to mark the entries it found
}

type indexEntry struct {
	key  Key
	size int64  // bytes of the entry file
	used int64  // last known use, unix nanoseconds: file mtime or a use here
	seq  uint64 // index.seq when added or last re-added
	gen  uint64 // index.gen of the last rebuild that found it
}

// scanned is one entry file found by a directory scan.
type scanned struct {
	key   Key
	size  int64
	mtime int64 // unix nanoseconds
}

func newIndex() *index {
	// The count is unbounded: the cache evicts by bytes, itself.
	l, err := simplelru.NewLRU[Key, *indexEntry](math.MaxInt, nil)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return &index{lru: l}
}

// add records d's file of size bytes, used at time used, as the most
// recently used entry.
func (x *index) add(d Key, size, used int64) {
	x.seq++
	if e, ok := x.lru.Get(d); ok {
		x.bytes += size - e.size
		e.size, e.used, e.seq = size, max(e.used, used), x.seq
		return
	}
	x.lru.Add(d, &indexEntry{key: d, size: size, used: used, seq: x.seq})
	x.bytes += size
}

// touch marks d used at time used and reports whether the index holds it.
func (x *index) touch(d Key, used int64) bool {
	e, ok := x.lru.Get(d)
	if ok {
		e.used = max(e.used, used)
	}
	return ok
}

// remove forgets d and returns the size its file had.
func (x *index) remove(d Key) (int64, bool) {
	e, ok := x.lru.Peek(d)
	if !ok {
		return 0, false
	}
	x.lru.Remove(d)
	x.bytes -= e.size
	return e.size, true
}

// popOldest removes and returns the least recently used entry.
func (x *index) popOldest() (Key, int64, bool) {
	d, e, ok := x.lru.RemoveOldest()
	if !ok {
		return d, 0, false
	}
	x.bytes -= e.size
	return d, e.size, true
}

func (x *index) has(d Key) bool { return x.lru.Contains(d) }
func (x *index) len() int       { return x.lru.Len() }

// keys returns every key, least recently used first.
func (x *index) keys() []Key { return x.lru.Keys() }

// rebuild replaces the index with the entries of a scan that started when
// x.seq was sinceSeq. An entry's recency is the later of its file's mtime
// (shared by every process) and its last use known here (finer grained,
// since Get refreshes mtimes at most once a minute); ties go by digest, so
// the order is deterministic. Entries this process added after the scan
// started are kept even if the scan missed them; older ones the scan did
// not find are gone from the directory and are dropped. Entries already in
// the index are reordered in place, without allocating.
func (x *index) rebuild(found []scanned, sinceSeq uint64) {
	type item struct {
		d    Key
		size int64
		used int64
	}
	x.gen++
	items := make([]item, 0, len(found)+16)
	for _, s := range found {
		it := item{d: s.key, size: s.size, used: s.mtime}
		if e, ok := x.lru.Peek(s.key); ok {
			it.used = max(it.used, e.used)
			e.gen = x.gen
		}
		items = append(items, it)
	}
	for _, e := range x.lru.Values() {
		switch {
		case e.gen == x.gen:
		case e.seq > sinceSeq:
			items = append(items, item{d: e.key, size: e.size, used: e.used})
		default:
			x.lru.Remove(e.key)
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(a.used, b.used); c != 0 {
			return c
		}
		if c := bytes.Compare(a.d.Digest[:], b.d.Digest[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.d.Algo, b.d.Algo)
	})
	x.bytes = 0
	for _, it := range items {
		x.seq++
		if e, ok := x.lru.Get(it.d); ok { // moves it to the front
			e.size, e.used, e.seq = it.size, it.used, x.seq
		} else {
			x.lru.Add(it.d, &indexEntry{key: it.d, size: it.size, used: it.used, seq: x.seq, gen: x.gen})
		}
		x.bytes += it.size
	}
}
