package fusemount

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

// gatedBackend delivers the first chunk of its first run at once and
// holds the rest of that run until the test says how it ends: release
// nil delivers them, an error fails the read there. Later runs pass
// through.
type gatedBackend struct {
	cb      ChunkBackend
	gate    chan error
	calls   atomic.Int64
	mu      sync.Mutex
	lengths []int // chunks asked for, by call
}

func (g *gatedBackend) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	return "", errors.New("gatedBackend reads runs only")
}

func (g *gatedBackend) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored []byte) error) (string, error) {
	first := g.calls.Add(1) == 1
	g.mu.Lock()
	g.lengths = append(g.lengths, len(chunks))
	g.mu.Unlock()
	return g.cb.ReadChunksFrom(ctx, blob, chunks, func(i int, dc rafs.Chunk, stored []byte) error {
		if first && i == 1 {
			select {
			case err := <-g.gate:
				if err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return deliver(i, dc, stored)
	})
}

// waiting reports whether a caller waits on the flight of chunk idx.
func waiting(f *Fetcher, idx uint32) bool {
	return f.flights.Waiters(idx) > 0
}

// The reader of a run's head gets it while the tail is still on its
// way; a reader of a tail chunk joins the run rather than asking again,
// and gets the tail's error when the tail fails; the head's reader is
// not failed by it; a later read of the failed chunk fetches it anew.
func TestFetcherServesHeadBeforeTail(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		tailErr error
	}{
		{"tail arrives", nil},
		{"tail fails", errors.New("injected: registry down, no peer holds the chunk")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fx := newFetcherFixture(t)
			be := &gatedBackend{cb: fx.be, gate: make(chan error, 1)}
			f, _ := fx.fetcher(t, be, openCache(t, t.TempDir()))
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			k0, _ := fx.boot.Chunk(0)
			k1, _ := fx.boot.Chunk(1)
			got := make([]byte, k0.Size)
			if err := f.ReadChunk(ctx, k0, got); err != nil {
				t.Fatalf("head: %v", err)
			}
			if !bytes.Equal(got, fx.want[0]) {
				t.Fatal("head: wrong bytes")
			}
			if !f.flights.Busy(k1.Index) {
				t.Fatal("the tail's chunk 1 is not in flight while its run is held")
			}

			tail := make(chan error, 1)
			buf := make([]byte, k1.Size)
			go func() { tail <- f.ReadChunk(ctx, k1, buf) }()
			rafstest.Eventually(t, 20*time.Second, "the tail reader to join the run", func() bool { return waiting(f, k1.Index) })
			be.gate <- tt.tailErr
			err := <-tail
			switch {
			case tt.tailErr == nil && err != nil:
				t.Fatalf("tail: %v", err)
			case tt.tailErr == nil && !bytes.Equal(buf, fx.want[1]):
				t.Fatal("tail: wrong bytes")
			case tt.tailErr != nil && !errors.Is(err, tt.tailErr):
				t.Fatalf("tail: got %v, want the run's error", err)
			}
			if n := be.calls.Load(); n != 1 {
				t.Errorf("backend calls: got %d, want 1 (the tail reader joins the run)", n)
			}
			if tt.tailErr == nil {
				return
			}
			// The head stays served, from memory; the failed chunk is
			// fetched again.
			if err := f.ReadChunk(ctx, k0, got); err != nil || !bytes.Equal(got, fx.want[0]) {
				t.Fatalf("head again: %v", err)
			}
			if err := f.ReadChunk(ctx, k1, buf); err != nil || !bytes.Equal(buf, fx.want[1]) {
				t.Fatalf("tail again: %v", err)
			}
			if n := be.calls.Load(); n != 2 {
				t.Errorf("backend calls: got %d, want 2", n)
			}
		})
	}
}

// A run nobody waits for any more before its head arrives is cancelled;
// the next reader starts a new one.
func TestFetcherAbandonedRunCancelled(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	started := make(chan struct{})
	cancelled := make(chan struct{})
	var calls atomic.Int64
	be := &funcBackend{read: func(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
		deliver func(int, rafs.Chunk, []byte) error) (string, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			close(cancelled)
			return "", ctx.Err()
		}
		return fx.be.ReadChunksFrom(ctx, blob, chunks, deliver)
	}}
	f, _ := fx.fetcher(t, be, nil)
	k0, _ := fx.boot.Chunk(0)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- f.ReadChunk(ctx, k0, make([]byte, k0.Size)) }()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the reader's cancellation", err)
	}
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the abandoned run was not cancelled")
	}
	got := make([]byte, k0.Size)
	if err := f.ReadChunk(t.Context(), k0, got); err != nil || !bytes.Equal(got, fx.want[0]) {
		t.Fatalf("read after the abandoned run: %v", err)
	}
}

// funcBackend is a ChunkBackend whose runs read calls.
type funcBackend struct {
	read func(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk, deliver func(int, rafs.Chunk, []byte) error) (string, error)
}

func (b *funcBackend) ReadBlobFrom(context.Context, rafs.Blob, int64, []byte) (string, error) {
	return "", errors.New("funcBackend reads runs only")
}

func (b *funcBackend) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(int, rafs.Chunk, []byte) error) (string, error) {
	return b.read(ctx, blob, chunks, deliver)
}

// decodedBackend is a DecodedChunkBackend over the fixture's backend
// that hands over each chunk's decoded bytes as verified, and may spoil
// the stored bytes it delivers with them.
type decodedBackend struct {
	cb          ChunkBackend
	spoilStored bool
	shortPlain  bool
}

func (d *decodedBackend) ReadBlobFrom(context.Context, rafs.Blob, int64, []byte) (string, error) {
	return "", errors.New("decodedBackend reads runs only")
}

func (d *decodedBackend) ReadDecodedChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored, plain []byte, src string) error) (string, error) {
	return d.cb.ReadChunksFrom(ctx, blob, chunks, func(i int, dc rafs.Chunk, stored []byte) error {
		plain := make([]byte, dc.Size)
		if err := rafs.DecodeChunk(dc, stored, plain); err != nil {
			return err
		}
		if d.spoilStored {
			stored = bytes.Clone(stored)
			stored[0] ^= 0xff
		}
		if d.shortPlain {
			plain = plain[:len(plain)-1]
		}
		return deliver(i, dc, stored, plain, "verified")
	})
}

// Decoded bytes a backend verified are used as they are, not decoded and
// hashed again (stored bytes spoilt after the backend's check do not
// matter in a memory-only fetcher); decoded bytes of the wrong size are
// refused.
func TestFetcherUsesVerifiedDecodedBytes(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	f, m := fx.fetcher(t, &decodedBackend{cb: fx.be, spoilStored: true}, nil)
	fx.readAll(t, f)
	if got := counter(m, "damselfly_mount_verify_failures_total"); got != 0 {
		t.Errorf("verify failures: got %v, want 0", got)
	}
	if got := counter(m, "damselfly_mount_reads_total"); got == 0 {
		t.Error("no reads counted")
	}

	f2, m2 := fx.fetcher(t, &decodedBackend{cb: fx.be, shortPlain: true}, nil)
	k, _ := fx.boot.Chunk(3)
	if err := f2.ReadChunk(t.Context(), k, make([]byte, k.Size)); err == nil {
		t.Fatal("decoded bytes of the wrong size were accepted")
	}
	if got := counter(m2, "damselfly_mount_verify_failures_total"); got == 0 {
		t.Error("refused decoded bytes not counted as a verification failure")
	}
}

// Many readers of every chunk at once, some giving up early: each gets
// the right bytes or its own cancellation, and Close leaves nothing
// running.
func TestFetcherConcurrentReaders(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	f, _ := fx.fetcher(t, fx.be, openCache(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range fx.boot.ChunkCount() {
				c, _ := fx.boot.Chunk(i)
				rctx := ctx
				if (int(i)+r)%5 == 0 {
					var stop context.CancelFunc
					rctx, stop = context.WithCancel(ctx)
					stop() // gives up at once
				}
				got := make([]byte, c.Size)
				err := f.ReadChunk(rctx, c, got)
				switch {
				case err != nil && rctx == ctx:
					t.Errorf("reader %d, chunk %d: %v", r, i, err)
				case err == nil && !bytes.Equal(got, fx.want[i]):
					t.Errorf("reader %d, chunk %d: wrong bytes", r, i)
				}
			}
		}()
	}
	wg.Wait()
	f.Close()
	if err := f.ReadChunk(ctx, mustChunk(t, fx, 0), make([]byte, 1)); err != nil && !errors.Is(err, errFetcherClosed) {
		t.Errorf("read after Close: got %v, want memory or errFetcherClosed", err)
	}
}

func mustChunk(t *testing.T, fx *fetcherFixture, i uint32) rafs.Chunk {
	t.Helper()
	c, err := fx.boot.Chunk(i)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
