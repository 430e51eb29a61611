package flight

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
)

// gone is a context that has already ended: a caller that gives up.
func gone() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// A second Join of a key in flight joins it and starts nothing; a key
// given twice in one Join gets one flight; keys not in flight are led by
// the new batch, in order.
func TestJoinCollapses(t *testing.T) {
	t.Parallel()
	var g Group[string, int]
	fs, b, ctx, shared := g.Join(t.Context(), "a", "b", "a")
	if b == nil || ctx == nil {
		t.Fatal("the first Join leads nothing")
	}
	if shared != 0 {
		t.Errorf("first Join: got shared %d, want 0", shared)
	}
	if fs[0] != fs[2] {
		t.Error("a key given twice got two flights")
	}
	if got := b.Flights(); len(got) != 2 || got[0].Key() != "a" || got[1].Key() != "b" {
		t.Errorf("led flights %v, want a then b", got)
	}
	if got := g.Waiters("a"); got != 3 {
		t.Errorf("got %d references, want 3", got)
	}
	fs2, b2, ctx2, shared2 := g.Join(t.Context(), "b", "c")
	if fs2[0] != fs[1] {
		t.Error("a Join of a key in flight did not join it")
	}
	if shared2 != 1 {
		t.Errorf("second Join: got shared %d, want 1", shared2)
	}
	if b2 == nil || b2 == b || ctx2 == nil || len(b2.Flights()) != 1 || fs2[1].Batch() != b2 {
		t.Fatal("the second Join does not lead c alone")
	}
	fs3, b3, ctx3, shared3 := g.Join(t.Context(), "c")
	if b3 != nil || ctx3 != nil || shared3 != 1 || fs3[0] != fs2[1] {
		t.Errorf("a Join of keys all in flight: got lead %v, shared %d; want none, 1", b3, shared3)
	}
}

// A caller that has joined a flight keeps its batch alive though every
// earlier caller gives up before the joiner begins to wait; the last
// caller to give up cancels a batch, whose unfinished flights leave the
// group, so the next caller starts afresh.
func TestLastWaiterCancels(t *testing.T) {
	t.Parallel()
	var g Group[int, string]
	fs, _, ctx, _ := g.Join(context.Background(), 7)
	fl := fs[0]
	joined, lead, _, _ := g.Join(context.Background(), 7)
	if lead != nil || joined[0] != fl {
		t.Fatal("the second Join did not join the flight")
	}
	if _, err := g.Wait(gone(), fl); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: got %v, want context.Canceled", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the batch was cancelled while a joiner still held its flight")
	}
	g.Finish(fl, "data", nil)
	if v, err := g.Wait(context.Background(), joined[0]); err != nil || v != "data" {
		t.Fatalf("joiner got %q, %v; want the batch's value", v, err)
	}

	fs, _, ctx, _ = g.Join(context.Background(), 8, 9)
	if _, err := g.Wait(gone(), fs[0]); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	if ctx.Err() != nil {
		t.Fatal("the batch was cancelled while its caller still held another of its flights")
	}
	g.Leave(fs[1])
	if ctx.Err() == nil {
		t.Fatal("a batch nobody waits for was not cancelled")
	}
	if g.Busy(8) || g.Busy(9) {
		t.Error("the flights of a cancelled batch are still in the group")
	}
	if got := g.Extend(fs[0].Batch(), 10); len(got) != 2 {
		t.Errorf("Extend of a cancelled batch: got %d flights, want the 2 it had", len(got))
	}
	if g.Busy(10) {
		t.Error("Extend of a cancelled batch added a flight")
	}
	if _, lead, _, _ := g.Join(context.Background(), 8); lead == nil {
		t.Error("a caller after the cancelled batch joined it")
	}
}

// A detached batch goes on when its last caller leaves, and its flights
// still collapse later callers until they finish.
func TestDetachedSurvives(t *testing.T) {
	t.Parallel()
	var g Group[int, string]
	fs, b, ctx, _ := g.Join(context.Background(), 1)
	tail := g.Extend(b, 2)
	b.Detach()
	g.Finish(fs[0], "head", nil)
	if v, err := g.Wait(context.Background(), fs[0]); err != nil || v != "head" {
		t.Fatalf("head: got %q, %v", v, err)
	}
	if ctx.Err() != nil {
		t.Fatal("a detached batch was cancelled when its last caller left")
	}
	joined, lead, _, _ := g.Join(gone(), 2)
	if lead != nil || joined[0] != tail[1] {
		t.Fatal("a caller of the tail did not join the detached batch")
	}
	if _, err := g.Wait(gone(), joined[0]); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	if ctx.Err() != nil || !g.Busy(2) {
		t.Fatal("a detached batch was cancelled by a caller giving up")
	}
	g.Finish(tail[1], "tail", nil)
	if g.Busy(2) {
		t.Error("a finished flight is still in the group")
	}
}

// Extend grows a batch over keys not in flight and stops at the first
// that is, so that a run does not fetch past another's flight.
func TestExtendStopsAtFlight(t *testing.T) {
	t.Parallel()
	var g Group[int, int]
	g.Join(context.Background(), 3)
	fs, b, _, _ := g.Join(context.Background(), 1)
	got := g.Extend(b, 2, 3, 4)
	var keys []int
	for _, f := range got {
		keys = append(keys, f.Key())
	}
	if fmt.Sprint(keys) != "[1 2]" {
		t.Errorf("got keys %v, want [1 2]", keys)
	}
	if got[0] != fs[0] {
		t.Error("Extend did not return the head first")
	}
	if g.Busy(4) {
		t.Error("Extend went past a key in flight")
	}
}

// A resolved flight gives its value to callers at once and stays in the
// group until settled, so that a caller coming meanwhile (even after the
// batch was cancelled) joins it and gets the value without a new fetch;
// once settled, the key starts a new flight.
func TestResolvedJoinersGetValue(t *testing.T) {
	t.Parallel()
	var g Group[string, []byte]
	fs, _, ctx, _ := g.Join(context.Background(), "k", "other")
	g.Resolve(fs[0], []byte("bytes"), nil)
	g.Resolve(fs[0], []byte("second"), errors.New("ignored"))
	if !fs[0].Resolved() || fs[0].Settled() {
		t.Fatal("a resolved flight is not ready, or already done")
	}
	g.Leave(fs...)
	if ctx.Err() == nil {
		t.Fatal("the batch was not cancelled when its caller left")
	}
	if !g.Busy("k") {
		t.Fatal("a resolved flight left the group before it was settled")
	}
	if g.Busy("other") {
		t.Error("an unresolved flight of a cancelled batch stayed in the group")
	}
	joined, lead, _, shared := g.Join(context.Background(), "k")
	if lead != nil || shared != 1 || joined[0] != fs[0] {
		t.Fatal("a caller did not join the resolved flight")
	}
	<-joined[0].Ready()
	if v, err := joined[0].Result(); err != nil || string(v) != "bytes" {
		t.Errorf("joiner got %q, %v; want the first result", v, err)
	}
	g.Settle(fs[0])
	<-joined[0].Done()
	g.Leave(joined...)
	if g.Busy("k") {
		t.Error("a settled flight is still in the group")
	}
	if _, lead, _, _ := g.Join(context.Background(), "k"); lead == nil {
		t.Error("a caller after the settled flight joined it")
	}
}

// Settle of a flight with no result is a bug in the caller: it panics
// rather than wake waiters with nothing to read.
func TestSettleBeforeResolvePanics(t *testing.T) {
	t.Parallel()
	var g Group[int, int]
	fs, _, _, _ := g.Join(context.Background(), 1)
	defer func() {
		if recover() == nil {
			t.Error("Settle before Resolve did not panic")
		}
	}()
	g.Settle(fs[0])
}

// After Close, Join starts and joins nothing: its flights have Close's
// error at once and are not in the group. Flights already in flight are
// left to their work, and still finish.
func TestClosedGroup(t *testing.T) {
	t.Parallel()
	var g Group[int, int]
	old, _, _, _ := g.Join(context.Background(), 1)
	errClosed := errors.New("closed")
	g.Close(errClosed)
	fs, lead, ctx, shared := g.Join(context.Background(), 1, 2)
	if lead != nil || ctx != nil || shared != 0 {
		t.Fatalf("a closed group: got lead %v, shared %d; want none", lead, shared)
	}
	for i, f := range fs {
		if f == old[0] {
			t.Errorf("key %d joined a flight of the open group", i)
		}
		if !f.Settled() {
			t.Fatalf("key %d: the flight is not finished", i)
		}
		if _, err := f.Result(); !errors.Is(err, errClosed) {
			t.Errorf("key %d: got %v, want the close error", i, err)
		}
	}
	if g.Busy(2) {
		t.Error("a closed group took a new flight")
	}
	g.Leave(fs...)
	if got := g.Extend(old[0].Batch(), 5); len(got) != 1 || g.Busy(5) {
		t.Error("Extend added a flight to a closed group")
	}
	g.Finish(old[0], 42, nil)
	if v, err := g.Wait(context.Background(), old[0]); v != 42 || err != nil {
		t.Errorf("the flight in progress: got %d, %v; want 42", v, err)
	}
}

// Callers join a key while its leader finishes it: each gets the value
// of the flight it joined, or leads a new one, and no caller waits on a
// flight that nobody will finish.
func TestJoinWhileFinishing(t *testing.T) {
	t.Parallel()
	var g Group[int, int]
	const callers, rounds = 8, 200
	var (
		mu     sync.Mutex
		leads  = map[*Flight[int, int]]int{} // the value each lead finished with
		nextID int
	)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range rounds {
				fs, lead, _, _ := g.Join(context.Background(), 1)
				if lead != nil {
					mu.Lock()
					nextID++
					id := nextID
					leads[fs[0]] = id
					mu.Unlock()
					lead.Cancel()
					g.Finish(fs[0], id, nil)
				}
				v, err := g.Wait(context.Background(), fs[0])
				mu.Lock()
				want, ok := leads[fs[0]]
				mu.Unlock()
				if err != nil || !ok || v != want {
					t.Errorf("got %d, %v; want %d from the flight's lead", v, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if g.Busy(1) {
		t.Error("a finished key is still in flight")
	}
	// Each of a caller's rounds gets a flight not settled before it, so
	// there are at least as many leads as rounds.
	if len(leads) < rounds || len(leads) > callers*rounds {
		t.Errorf("got %d leads for %d calls", len(leads), callers*rounds)
	}
}

// Of many callers of one batch that give up at once, the last one
// cancels it, whichever it is; while one caller still waits, the batch
// goes on, and that caller gets the value.
func TestLastOfManyCancels(t *testing.T) {
	t.Parallel()
	for _, stay := range []bool{false, true} {
		t.Run(fmt.Sprintf("one stays %v", stay), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var g Group[int, int]
				const n = 16
				fs, _, bctx, _ := g.Join(context.Background(), 1)
				for range n - 1 {
					g.Join(context.Background(), 1)
				}
				giveUp, cancel := context.WithCancel(context.Background())
				stayer := make(chan error, 1)
				var wg sync.WaitGroup
				for i := range n {
					if stay && i == 0 {
						go func() {
							_, err := g.Wait(context.Background(), fs[0])
							stayer <- err
						}()
						continue
					}
					wg.Go(func() {
						if _, err := g.Wait(giveUp, fs[0]); err == nil {
							t.Error("a caller that gave up got no error")
						}
					})
				}
				synctest.Wait() // everyone waits
				cancel()
				wg.Wait()
				if got := bctx.Err() != nil; got == stay {
					t.Fatalf("batch cancelled: got %v, want %v", got, !stay)
				}
				if stay {
					g.Finish(fs[0], 1, nil)
					if err := <-stayer; err != nil {
						t.Errorf("the caller that stayed: %v", err)
					}
				}
			})
		})
	}
}

// A value goes to the release function once its flight is settled and
// every reference to it is given back, whichever comes last, and only
// once; a value that loses to an earlier result is never released (its
// caller may be using it); flights that end with nobody holding them are
// released at their settling.
func TestReleaseAfterSettleAndLastLeave(t *testing.T) {
	t.Parallel()
	var g Group[string, int]
	var released []int
	g.SetRelease(func(v int) { released = append(released, v) })
	want := func(step string, vs ...int) {
		t.Helper()
		if fmt.Sprint(released) != fmt.Sprint(vs) {
			t.Fatalf("%s: released %v, want %v", step, released, vs)
		}
	}

	fs, b, _, _ := g.Join(t.Context(), "a", "a")
	fs2, _, _, _ := g.Join(t.Context(), "a")
	g.Resolve(fs[0], 1, nil)
	g.Resolve(fs[0], 2, nil) // loses: nobody's result, and not released
	want("second value")
	g.Settle(fs[0])
	want("settled, held three times")
	g.Leave(fs[0])
	g.Leave(fs2...)
	want("settled, held once")
	if v, err := fs[1].Result(); v != 1 || err != nil {
		t.Fatalf("Result while held: %d, %v", v, err)
	}
	g.Leave(fs[1])
	want("settled, unheld", 1)
	g.Leave() // nothing to give back: nothing more released
	want("again", 1)
	b.Cancel()

	// Left before it is settled: released at the settling.
	fs, b, _, _ = g.Join(t.Context(), "b")
	g.Resolve(fs[0], 3, nil)
	g.Leave(fs...)
	want("resolved, unheld, not settled", 1)
	g.Settle(fs[0])
	want("settled after the last leave", 1, 3)
	g.Finish(fs[0], 4, nil) // settled already: 4 loses
	want("finished again", 1, 3)
	b.Cancel()

	// Closed: the flights Join makes are finished with the zero value,
	// released when given back.
	g.Close(errors.New("closed"))
	fs, _, _, _ = g.Join(t.Context(), "c")
	g.Leave(fs...)
	want("closed", 1, 3, 0)
}
