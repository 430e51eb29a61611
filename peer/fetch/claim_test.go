package fetch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
)

// gatedOrigin serves a blob from memory once its gate is open, counting
// reads.
type gatedOrigin struct {
	blob  []byte
	gate  chan struct{}
	reads atomic.Int64
}

func (o *gatedOrigin) ReadRange(ctx context.Context, _ registry.Ref, _ rafs.Digest, off int64, p []byte) error {
	o.reads.Add(1)
	select {
	case <-o.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	copy(p, o.blob[off:])
	return nil
}

// claimRig is an engine over a node cache and an origin holding three raw
// chunks of one blob.
type claimRig struct {
	e      *Engine
	o      *gatedOrigin
	c      *cache.Cache
	chunks []rafs.Chunk
	data   [][]byte
	blob   rafs.Digest
}

func newClaimRig(t *testing.T, hedge time.Duration) *claimRig {
	t.Helper()
	h, c := soloHostCache(t)
	r := &claimRig{c: c, blob: rafs.Digest{9}, o: &gatedOrigin{gate: make(chan struct{})}}
	for i := range 3 {
		d := fmt.Appendf(nil, "piece %d of a plain blob, raw", i)
		r.chunks = append(r.chunks, rafs.Chunk{Ordinal: uint32(i), Digest: rafs.Digest(sha256.Sum256(d)),
			CompressedOffset: uint64(len(r.o.blob)), CompressedSize: uint32(len(d)), Size: uint32(len(d))})
		r.data = append(r.data, d)
		r.o.blob = append(r.o.blob, d...)
	}
	cfg := soloConfig()
	cfg.HedgeDelay = hedge
	var err error
	r.e, err = New(cfg, Deps{Host: h, Cache: c, Holdings: &memHoldings{held: map[cache.Key]bool{}}, Origin: r.o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.e.Close)
	return r
}

// read reads chunk i as a client's read would, in the background.
func (r *claimRig) read(t *testing.T, i int) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- r.e.ReadChunks(t.Context(), registry.Ref{}, r.blob, r.chunks[i:i+1], func(_ int, _ rafs.Chunk, stored []byte) error {
			if string(stored) != string(r.data[i]) {
				return fmt.Errorf("read of chunk %d got %q, want %q", i, stored, r.data[i])
			}
			return nil
		})
	}()
	return done
}

// keep caches chunk i as the claim's caller does before Kept.
func (r *claimRig) keep(t *testing.T, cl *Claimed, i int) {
	t.Helper()
	if err := r.c.PutChunk(r.chunks[i], r.data[i]); err != nil {
		t.Fatal(err)
	}
	cl.Kept(r.chunks[i], r.chunks[i], r.data[i])
}

func waitErr(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10s", what)
	}
}

// A read of a claimed chunk waits for the claim's fetch and gets its
// bytes: the origin is not asked. A chunk the claim did not keep goes to
// the engine for the read waiting on it.
func TestClaimIsTheReadsFlight(t *testing.T) {
	r := newClaimRig(t, 0)
	cl := r.e.Claim(registry.Ref{}, r.blob, r.blob, r.chunks[:2])
	if got := len(cl.Chunks()); got != 2 {
		t.Fatalf("claimed %d chunks of a cold engine, want 2", got)
	}
	first, second := r.read(t, 0), r.read(t, 1)
	select {
	case err := <-first:
		t.Fatalf("the read of a claimed chunk returned before the claim kept it: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	r.keep(t, cl, 0)
	waitErr(t, first, "read of the kept chunk")
	if n := r.o.reads.Load(); n != 0 {
		t.Errorf("the origin was asked %d times, want 0: the claim's fetch is the read's", n)
	}
	// Chunk 1 never came: Release hands it to the engine, which fetches
	// it for the read waiting on it.
	close(r.o.gate)
	cl.Release()
	waitErr(t, second, "read of the chunk the claim gave back")
	if n := r.o.reads.Load(); n != 1 {
		t.Errorf("the origin was asked %d times, want 1 (the chunk given back)", n)
	}
	if h := r.e.Metrics().Stats().ClaimHandovers; h != 1 {
		t.Errorf("%d chunks handed over, want 1", h)
	}
	cl.Release() // a second Release is a no-op
}

// A claim leaves out the chunks a read is fetching already.
func TestClaimSkipsChunksInFlight(t *testing.T) {
	r := newClaimRig(t, 0)
	reading := r.read(t, 1)
	deadline := time.Now().Add(5 * time.Second)
	for r.o.reads.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the read did not reach the origin")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cl := r.e.Claim(registry.Ref{}, r.blob, r.blob, r.chunks)
	got := cl.Chunks()
	if len(got) != 2 || got[0].Ordinal != 0 || got[1].Ordinal != 2 {
		t.Errorf("claimed %v, want chunks 0 and 2: chunk 1 is a read's fetch", got)
	}
	r.keep(t, cl, 0)
	r.keep(t, cl, 2)
	cl.Release()
	close(r.o.gate)
	waitErr(t, reading, "the read the claim left alone")
	if h := r.e.Metrics().Stats().ClaimHandovers; h != 0 {
		t.Errorf("%d chunks handed over, want 0: the claim kept all it took", h)
	}
}

// A claim whose fetch makes no progress for HedgeDelay hands its
// chunks to the engine, so that a read waiting on one does not wait out
// the caller's request; a late Kept is then a no-op.
func TestClaimHandsOverWhenStalled(t *testing.T) {
	r := newClaimRig(t, 50*time.Millisecond)
	close(r.o.gate)
	cl := r.e.Claim(registry.Ref{}, r.blob, r.blob, r.chunks[:1])
	defer cl.Release()
	start := time.Now()
	waitErr(t, r.read(t, 0), "read of a chunk whose claim stalled")
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("the read returned after %v, before HedgeDelay: it did not wait for the claim", took)
	}
	if n := r.o.reads.Load(); n != 1 {
		t.Errorf("the origin was asked %d times, want 1 (the engine's fetch after the handover)", n)
	}
	r.keep(t, cl, 0) // the stalled fetch's copy arrives late
}

// Progress puts the handover off.
func TestClaimProgressDefersHandover(t *testing.T) {
	// Progress every 50 ms for 600 ms against a HedgeDelay of 500 ms:
	// only a gap of 450 ms between two steps (a very loaded machine)
	// could let the handover fire.
	r := newClaimRig(t, 500*time.Millisecond)
	close(r.o.gate)
	cl := r.e.Claim(registry.Ref{}, r.blob, r.blob, r.chunks[:1])
	defer cl.Release()
	reading := r.read(t, 0)
	for range 12 {
		time.Sleep(50 * time.Millisecond)
		cl.Progress()
	}
	if n := r.o.reads.Load(); n != 0 {
		t.Errorf("the origin was asked %d times while the claim made progress, want 0", n)
	}
	r.keep(t, cl, 0)
	waitErr(t, reading, "read of the kept chunk")
	if n := r.o.reads.Load(); n != 0 {
		t.Errorf("the origin was asked %d times, want 0", n)
	}
}
