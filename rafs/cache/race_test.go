package cache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestConcurrentUse hammers two Caches on one small directory from many
// goroutines with every operation, eviction included: a read returns the
// right bytes or ErrNotFound, and nothing else fails.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 8
		ops        = 400
		size       = 8 << 10
	)
	chunks := make([]testChunk, 24)
	for i := range chunks {
		chunks[i] = makeChunk(uint64(i), size, i%3 == 0)
	}
	dir := t.TempDir()
	cfg := func() Config { cc := Default(""); cc.Dir, cc.Capacity = dir, 12*(headerSize+size); return cc }()
	caches := []*Cache{openTest(t, cfg), openTest(t, cfg)}

	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			if err := hammer(caches[g%2], chunks, uint64(g), ops); err != nil {
				errs <- fmt.Errorf("goroutine %d: %w", g, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, c := range caches {
		if err := c.Rescan(); err != nil {
			t.Fatalf("Rescan %d: %v", i, err)
		}
		s := c.Stats()
		t.Logf("cache %d: %+v", i, s)
		if s.Errors != 0 || s.Corrupt != 0 {
			t.Errorf("cache %d: %d errors, %d corrupt, want none", i, s.Errors, s.Corrupt)
		}
		if s.Bytes > c.high {
			t.Errorf("cache %d: %d bytes after Rescan, want <= %d", i, s.Bytes, c.high)
		}
	}
}

func hammer(c *Cache, chunks []testChunk, seed uint64, ops int) error {
	r := rand.New(rand.NewPCG(seed, 1))
	var buf []byte
	for range ops {
		tc := chunks[r.IntN(len(chunks))]
		d := tc.ckKey()
		switch op := r.IntN(100); {
		case op < 35:
			m, got, err := c.Get(d, buf)
			if err == nil {
				buf = got
				if m != tc.meta() || !bytes.Equal(got, tc.stored) {
					return fmt.Errorf("Get %s returned wrong bytes", d)
				}
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
		case op < 55:
			dst := make([]byte, tc.ck.Size)
			if err := c.ReadChunk(tc.ck, dst); err == nil {
				if !bytes.Equal(dst, tc.data) {
					return fmt.Errorf("ReadChunk %s returned wrong bytes", d)
				}
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
		case op < 85:
			if err := c.PutChunk(tc.ck, tc.stored); err != nil {
				return err
			}
		case op < 92:
			if err := c.Remove(d); err != nil {
				return err
			}
		case op < 95:
			c.Has(d)
			c.Keys()
			c.Stats()
		default:
			if err := c.Rescan(); err != nil {
				return err
			}
		}
	}
	return nil
}
