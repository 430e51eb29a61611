package cache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// packTest opens a buffered cache (packs) on dir.
func packTest(t *testing.T, dir string, capacity int64) *Cache {
	t.Helper()
	cc := Default(dir)
	cc.Capacity = capacity
	return openTestIO(t, cc)
}

// A record another process appends is found by the next lookup that
// misses, by Has, Get and ReadChunk alike, both ways.
func TestPacksSharedBetweenProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := packTest(t, dir, 0), packTest(t, dir, 0)
	for i := range 6 {
		tc := makeChunk(uint64(100+i), 3000+i*4000, i%2 == 0)
		w, r := a, b
		if i >= 3 {
			w, r = b, a
		}
		mustPut(t, w, tc.ckKey(), tc.meta(), tc.stored)
		switch i % 3 {
		case 0:
			if !r.Has(tc.ckKey()) {
				t.Fatalf("chunk %d: Has in the other cache: false", i)
			}
		case 1:
			if _, got, err := r.Get(tc.ckKey(), nil); err != nil || !bytes.Equal(got, tc.stored) {
				t.Fatalf("chunk %d: Get in the other cache: %v", i, err)
			}
		case 2:
			dst := make([]byte, tc.ck.Size)
			if err := r.ReadChunk(tc.ck, dst); err != nil || !bytes.Equal(dst, tc.data) {
				t.Fatalf("chunk %d: ReadChunk in the other cache: %v", i, err)
			}
		}
	}
	if len(entryFiles(t, dir)) != 0 {
		t.Error("entry files written")
	}
	if n := len(packFiles(t, dir)); n != 2 {
		t.Errorf("%d packs, want one per process", n)
	}
	// A third process opening the directory finds all six.
	c := packTest(t, dir, 0)
	if s := c.Stats(); s.Entries != 6 || s.Packs != 2 {
		t.Errorf("a new cache: %+v, want 6 entries in 2 packs", s)
	}
	// Putting what another process holds writes nothing.
	before := packFiles(t, dir)
	tc := makeChunk(100, 3000, true)
	mustPut(t, c, tc.ckKey(), tc.meta(), tc.stored)
	if after := packFiles(t, dir); len(after) != len(before) {
		t.Errorf("a put of a held chunk made a pack: %v", after)
	}
}

// Packs are capped (a sixteenth of the capacity, at least 1 MiB) and
// evicted whole, least recently used first; the evicting process and the
// others hand the keys of an evicted pack to their eviction hooks, and
// nothing else.
func TestPackEviction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const capacity = 16 << 20 // packs of 1 MiB
	w, r := packTest(t, dir, capacity), packTest(t, dir, capacity)
	var mu sync.Mutex
	hooked := map[*Cache][]Key{}
	for _, c := range []*Cache{w, r} {
		c.SetEvictHook(func(keys []Key) {
			mu.Lock()
			hooked[c] = append(hooked[c], keys...)
			mu.Unlock()
		})
	}
	var keys []Key
	for i := range 80 { // 80 x 300 KiB: 24 MiB, over the high watermark
		tc := makeChunk(uint64(1000+i), 300<<10, false)
		mustPut(t, w, tc.ckKey(), tc.meta(), tc.stored)
		keys = append(keys, tc.ckKey())
		if !r.Has(tc.ckKey()) { // r learns each record as it is written
			t.Fatalf("chunk %d: the other cache does not see it", i)
		}
		if i == 2 {
			// An early chunk used again stays (its pack does).
			time.Sleep(10 * time.Millisecond)
		}
		if i > 2 && i%8 == 0 {
			if _, _, err := w.Get(keys[0], nil); err != nil {
				t.Fatalf("Get of the first chunk: %v", err)
			}
		}
	}
	if err := w.Rescan(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for name, size := range packFiles(t, dir) {
		total += size
		if size > 1<<20+headerSize+300<<10 {
			t.Errorf("pack %s of %d bytes, over its cap", name, size)
		}
	}
	if high := (Config{Capacity: capacity, HighWatermark: DefaultHighWatermark}).highBytes(); total > high {
		t.Errorf("packs hold %d bytes after the rescan, over the high watermark %d", total, high)
	}
	mu.Lock()
	gone := slices.Clone(hooked[w])
	mu.Unlock()
	if len(gone) == 0 {
		t.Fatal("nothing evicted")
	}
	if slices.Contains(gone, keys[0]) {
		t.Error("the chunk read all along was evicted")
	}
	for _, k := range keys {
		if w.Has(k) == slices.Contains(gone, k) {
			t.Errorf("%s: Has %v, evicted %v", k, w.Has(k), slices.Contains(gone, k))
		}
	}
	// The other process learns of it at its next look.
	if err := r.Rescan(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	rgone := slices.Clone(hooked[r])
	mu.Unlock()
	slices.SortFunc(gone, cmpKey)
	slices.SortFunc(rgone, cmpKey)
	if !slices.Equal(gone, rgone) {
		t.Errorf("the other cache's hook got %d keys, the evicting one's %d", len(rgone), len(gone))
	}
	for _, k := range gone {
		if r.Has(k) {
			t.Errorf("%s evicted, still held by the other cache", k)
		}
	}
}

func cmpKey(a, b Key) int {
	if c := bytes.Compare(a.Digest[:], b.Digest[:]); c != 0 {
		return c
	}
	return int(a.Algo) - int(b.Algo)
}

// A damaged record is a miss, counted as corrupt, in every reader; the
// pack's other records still read; the writer's vouching does not hide
// it, since every read checks the CRC.
func TestPackCorruptRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := packTest(t, dir, 0)
	tcs := []testChunk{makeChunk(1, 10000, true), makeChunk(2, 20000, false), makeChunk(3, 30000, true)}
	for _, tc := range tcs {
		mustPut(t, w, tc.ckKey(), tc.meta(), tc.stored)
	}
	name := w.packNameOf(tcs[1].ckKey())
	path := filepath.Join(dir, packsDirName, name)
	w.mu.Lock()
	off := w.packs.locs[tcs[1].ckKey()].off
	w.mu.Unlock()
	flip(t, path, int(off)+headerSize+500)

	r := packTest(t, dir, 0)
	for _, c := range []*Cache{w, r} {
		v := &verifyCounter{tc: tcs[1]}
		_, _, err := c.GetVerified(tcs[1].ckKey(), nil, v.verify)
		wantNotFound(t, "GetVerified of a damaged record", err)
		if s := c.Stats(); s.Corrupt != 1 {
			t.Errorf("Corrupt %d, want 1", s.Corrupt)
		}
		if c.Has(tcs[1].ckKey()) {
			t.Error("the damaged record is still held")
		}
		for _, tc := range []testChunk{tcs[0], tcs[2]} {
			dst := make([]byte, tc.ck.Size)
			if err := c.ReadChunk(tc.ck, dst); err != nil || !bytes.Equal(dst, tc.data) {
				t.Errorf("a record beside the damaged one: %v", err)
			}
		}
	}
	// Put again, it is written again and reads.
	mustPut(t, w, tcs[1].ckKey(), tcs[1].meta(), tcs[1].stored)
	if _, got, err := w.Get(tcs[1].ckKey(), nil); err != nil || !bytes.Equal(got, tcs[1].stored) {
		t.Errorf("after a new put: %v", err)
	}
}

// A pack torn by a crash keeps the records before the tear; a header
// that does not check stops the scan without losing what is before it.
func TestPackTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := packTest(t, dir, 0)
	tcs := []testChunk{makeChunk(1, 10000, false), makeChunk(2, 20000, false), makeChunk(3, 30000, false)}
	for _, tc := range tcs {
		mustPut(t, w, tc.ckKey(), tc.meta(), tc.stored)
	}
	path := filepath.Join(dir, packsDirName, w.packNameOf(tcs[0].ckKey()))
	w.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	truncate(t, path, fi.Size()-100)

	r := packTest(t, dir, 0)
	if s := r.Stats(); s.Entries != 2 {
		t.Errorf("%d entries from a torn pack, want 2", s.Entries)
	}
	for i, tc := range tcs {
		_, got, err := r.Get(tc.ckKey(), nil)
		if i < 2 && (err != nil || !bytes.Equal(got, tc.stored)) {
			t.Errorf("record %d before the tear: %v", i, err)
		}
		if i == 2 {
			wantNotFound(t, "the torn record", err)
		}
	}
	// The reader puts the torn chunk in a pack of its own.
	mustPut(t, r, tcs[2].ckKey(), tcs[2].meta(), tcs[2].stored)
	if name := r.packNameOf(tcs[2].ckKey()); name == "" || name == filepath.Base(path) {
		t.Errorf("the new record went to %q", name)
	}
	if n := len(packFiles(t, dir)); n != 2 {
		t.Errorf("%d packs, want 2", n)
	}
}

// Remove marks a record removed in its pack, for every process: their
// next reads miss it, a new put of the key is found instead, scans skip
// the removed record and find the ones after it, and its payload's
// space is given back.
func TestPackRemove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, r := packTest(t, dir, 0), packTest(t, dir, 0)
	tcs := []testChunk{makeChunk(1, 64<<10, false), makeChunk(2, 64<<10, false), makeChunk(3, 64<<10, false)}
	for _, tc := range tcs {
		mustPut(t, w, tc.ckKey(), tc.meta(), tc.stored)
		if !r.Has(tc.ckKey()) {
			t.Fatal("the reader does not see the record")
		}
	}
	path := filepath.Join(dir, packsDirName, w.packNameOf(tcs[1].ckKey()))
	var before unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		t.Fatal(err)
	}
	// Removed by a third process, which neither wrote nor read it.
	x := packTest(t, dir, 0)
	if err := x.Remove(tcs[1].ckKey()); err != nil {
		t.Fatal(err)
	}
	var after unix.Stat_t
	if err := unix.Stat(path, &after); err != nil {
		t.Fatal(err)
	}
	if after.Blocks >= before.Blocks {
		t.Errorf("the removed payload's space was not given back: %d blocks, %d before", after.Blocks, before.Blocks)
	}
	for _, c := range []*Cache{w, r} {
		_, _, err := c.Get(tcs[1].ckKey(), nil)
		wantNotFound(t, "Get of a removed record", err)
		if s := c.Stats(); s.Corrupt != 0 {
			t.Errorf("a removed record counted as corrupt: %+v", s)
		}
	}
	junk := bytes.Repeat([]byte{0x5a}, len(tcs[1].stored))
	mustPut(t, x, tcs[1].ckKey(), tcs[1].meta(), junk)
	if _, got, err := r.Get(tcs[1].ckKey(), nil); err != nil || !bytes.Equal(got, junk) {
		t.Errorf("after a new put elsewhere: %v", err)
	}
	fresh := packTest(t, dir, 0)
	for i, tc := range tcs {
		_, got, err := fresh.Get(tc.ckKey(), nil)
		want := tc.stored
		if i == 1 {
			want = junk
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("a new cache, record %d: %v", i, err)
		}
	}
}

// What packs/ holds that is not a pack is left alone, or, when its name
// is a pack's and its header is not, deleted once stalePackAge old.
func TestPackStrangers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := packTest(t, dir, 0)
	pdir := filepath.Join(dir, packsDirName)
	fresh := filepath.Join(pdir, "0123456789abcdef-00000001.pack")
	old := filepath.Join(pdir, "0123456789abcdef-00000002.pack")
	other := filepath.Join(pdir, "README")
	for _, p := range []string{fresh, old, other} {
		writeFile(t, p, bytes.Repeat([]byte("x"), 200))
	}
	long := time.Now().Add(-2 * stalePackAge)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	tc := makeChunk(1, 1000, false)
	mustPut(t, w, tc.ckKey(), tc.meta(), tc.stored)
	r := packTest(t, dir, 0)
	if !r.Has(tc.ckKey()) {
		t.Error("the real pack is not read")
	}
	if !exists(fresh) || !exists(other) {
		t.Error("a young non-pack, or a file not named as a pack, was deleted")
	}
	if exists(old) {
		t.Error("an old file named as a pack, with no pack header, survived")
	}
}

// Deleting the whole directory under a writer loses what it held (every
// process forgets it, and says so to its hook) and nothing else: puts
// start a new pack.
func TestPacksDirectoryDeleted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cache")
	w := packTest(t, dir, 0)
	var hooked []Key
	var mu sync.Mutex
	w.SetEvictHook(func(keys []Key) { mu.Lock(); hooked = append(hooked, keys...); mu.Unlock() })
	a := makeChunk(1, 5000, false)
	mustPut(t, w, a.ckKey(), a.meta(), a.stored)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// The next put finds its pack unlinked, and starts another.
	b := makeChunk(2, 5000, false)
	mustPut(t, w, b.ckKey(), b.meta(), b.stored)
	if w.Has(a.ckKey()) {
		t.Error("Has after the directory was deleted")
	}
	mu.Lock()
	if !slices.Equal(hooked, []Key{a.ckKey()}) {
		t.Errorf("hook got %v, want the deleted key", hooked)
	}
	mu.Unlock()
	r := packTest(t, dir, 0)
	if _, got, err := r.Get(b.ckKey(), nil); err != nil || !bytes.Equal(got, b.stored) {
		t.Errorf("a put after the delete, read by another cache: %v", err)
	}
}

// Many goroutines in two processes putting and reading the same chunks:
// every read is whole and right (run with -race).
func TestPacksConcurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cs := []*Cache{packTest(t, dir, 8<<20), packTest(t, dir, 8<<20)}
	tcs := make([]testChunk, 40)
	for i := range tcs {
		tcs[i] = makeChunk(uint64(500+i), 50000+i*1000, i%3 == 0)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			c := cs[g%2]
			for n := range 3 * len(tcs) {
				tc := tcs[(n*7+g)%len(tcs)]
				if err := c.Put(tc.ckKey(), tc.meta(), tc.stored); err != nil {
					errs <- err
					return
				}
				dst := make([]byte, tc.ck.Size)
				err := cs[(g+1)%2].ReadChunk(tc.ck, dst)
				if err == nil && !bytes.Equal(dst, tc.data) {
					errs <- errors.New("wrong bytes")
					return
				}
				if err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, c := range cs {
		if s := c.Stats(); s.Corrupt != 0 || s.Errors != 0 {
			t.Errorf("stats %+v, want no corrupt reads or errors", s)
		}
	}
}

// What a process wrote itself is not verified again; another process
// verifies a record once.
func TestPackVouching(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := packTest(t, dir, 0), packTest(t, dir, 0)
	v := &verifyCounter{tc: makeChunk(9, 100<<10, true)}
	mustPut(t, a, v.tc.ckKey(), v.tc.meta(), v.tc.stored)
	getVerified(t, a, v)
	if v.calls != 0 {
		t.Fatalf("the writer verified its own record %d times", v.calls)
	}
	getVerified(t, b, v)
	getVerified(t, b, v)
	if v.calls != 1 {
		t.Fatalf("another cache verified the record %d times over two reads, want 1", v.calls)
	}
}

// FuzzScanRecords scans arbitrary bytes as a pack's records: it never
// panics, and every record it returns lies within the bytes, in order,
// with a header that decodes.
func FuzzScanRecords(f *testing.F) {
	var hb [headerSize]byte
	encodeHeader(&hb, header{key: fakeDigest(1), meta: rawMeta(4)})
	f.Add(append(hb[:], 1, 2, 3, 4))
	f.Add(append(append(hb[:], 1, 2, 3, 4), hb[:]...))
	f.Add([]byte("DFLYCHNK"))
	f.Add(append(append(encodeTombstone(4), 0, 0, 0, 0), append(hb[:], 1, 2, 3, 4)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		readAt := func(p []byte, off int64) (int, error) {
			if off >= int64(len(in)) {
				return 0, errors.New("EOF")
			}
			n := copy(p, in[off:])
			if n < len(p) {
				return n, errors.New("short")
			}
			return n, nil
		}
		recs, next, _ := scanRecords(readAt, 0, int64(len(in)))
		end := int64(0)
		for _, r := range recs {
			if r.off < end { // removed records in between are skipped
				t.Fatalf("record at %d, before the end of the last, %d", r.off, end)
			}
			if _, err := decodeHeader(in[r.off : r.off+headerSize]); err != nil {
				t.Fatalf("record at %d: %v", r.off, err)
			}
			end = r.off + headerSize + int64(r.stored)
			if end > int64(len(in)) {
				t.Fatalf("record at %d ends at %d, past %d", r.off, end, len(in))
			}
		}
		if next < end || next > int64(len(in)) {
			t.Fatalf("next %d, want %d to %d", next, end, len(in))
		}
	})
}
