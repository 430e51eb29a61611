package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDirectoryDeleted deletes the whole cache directory under a live
// Cache, as an operator's rm -rf would: reads miss, writes recreate what
// they need, eviction keeps working.
func TestDirectoryDeleted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/cache"
	const size = 4096
	entry := int64(headerSize + size)
	c := openTest(t, func() Config { cc := Default(""); cc.Dir, cc.Capacity = dir, 20*entry; return cc }())
	chunks := make([]testChunk, 10)
	for i := range chunks {
		chunks[i] = makeChunk(uint64(i), size, false)
		mustPut(t, c, KeyOf(chunks[i].ck), chunks[i].meta(), chunks[i].stored)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i, tc := range chunks {
		_, _, err := c.Get(KeyOf(tc.ck), nil)
		wantNotFound(t, "Get after rm -rf", err)
		wantNotFound(t, "ReadChunk after rm -rf", c.ReadChunk(tc.ck, make([]byte, size)))
		if c.Has(KeyOf(tc.ck)) {
			t.Errorf("Has %d after rm -rf: got true", i)
		}
	}
	if s := c.Stats(); s.Entries != 0 || s.Errors != 0 {
		t.Errorf("stats after the misses: got %+v, want no entries, no errors", s)
	}
	if err := c.Remove(chunks[0].ckKey()); err != nil {
		t.Errorf("Remove after rm -rf: %v", err)
	}

	// Writes work again, and so does eviction, which needs DIR/lock.
	for i := range 40 {
		tc := makeChunk(uint64(100+i), size, false)
		mustPut(t, c, KeyOf(tc.ck), tc.meta(), tc.stored)
		dst := make([]byte, size)
		if err := c.ReadChunk(tc.ck, dst); err != nil || !bytes.Equal(dst, tc.data) {
			t.Fatalf("ReadChunk %d after rm -rf: %v", i, err)
		}
	}
	if s := c.Stats(); s.Evictions == 0 || s.Bytes > c.high {
		t.Errorf("stats: got %+v, want evictions and bytes <= %d", s, c.high)
	}
	if err := c.Rescan(); err != nil {
		t.Errorf("Rescan: %v", err)
	}
}

// TestDirectoryDeletedWhileReading deletes the directory again and again
// while readers and writers run: every read either returns the right bytes
// or ErrNotFound.
func TestDirectoryDeletedWhileReading(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/cache"
	c := openTest(t, Default(dir))
	chunks := make([]testChunk, 8)
	for i := range chunks {
		chunks[i] = makeChunk(uint64(i), 32<<10, i%2 == 0)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var hits, puts atomic.Int64
	errs := make(chan error, 100)
	for g := range 4 {
		wg.Go(func() {
			dst := make([]byte, 32<<10)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tc := chunks[(g+i)%len(chunks)]
				if err := c.ReadChunk(tc.ck, dst); err == nil {
					hits.Add(1)
					if !bytes.Equal(dst, tc.data) {
						errs <- errors.New("ReadChunk returned wrong bytes")
						return
					}
				} else if !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				// A put can lose a race with rm -rf more than once in a
				// row; the caller then serves from memory.
				if err := c.PutChunk(tc.ck, tc.stored); err == nil {
					puts.Add(1)
				} else if !errors.Is(err, fs.ErrNotExist) {
					errs <- err
					return
				}
			}
		})
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	deletions := 0
	for time.Now().Before(deadline) {
		os.RemoveAll(dir)
		deletions++
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d deletions, %d hits, %d puts", deletions, hits.Load(), puts.Load())
	if hits.Load() == 0 || puts.Load() == 0 {
		t.Error("got no hits or no puts: the test exercised nothing")
	}
}
