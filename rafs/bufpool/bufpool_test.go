package bufpool

import "testing"

func TestCap(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, Min}, {1, Min}, {64 << 10, Min}, {Min, Min}, {Min + 1, 128<<10 + Slack},
		{4 << 20, 4<<20 + Slack}, {4<<20 + 9, 4<<20 + Slack}, {4<<20 + Slack + 1, 8<<20 + Slack},
		{Max, Max}, {Max + 1, Max + 1},
	} {
		if got := Cap(tc.n); got != tc.want {
			t.Errorf("Cap(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestGetPutTake(t *testing.T) {
	b := Get(300 << 10)
	if len(b) != 300<<10 || cap(b) != 512<<10+Slack {
		t.Fatalf("Get(300 KiB): len %d cap %d", len(b), cap(b))
	}
	b[0] = 7
	Put(b)
	// sync.Pool may drop what it was given (a GC between Put and Take),
	// so a miss is allowed; a hit must be of the class asked for.
	if got, ok := Take(257 << 10); ok {
		if len(got) != 257<<10 || cap(got) != 512<<10+Slack {
			t.Fatalf("Take(257 KiB) after Put: len %d cap %d", len(got), cap(got))
		}
	}
	if _, ok := Take(Max + 1); ok {
		t.Fatal("Take above Max returned a buffer")
	}
	if _, ok := Take(-1); ok {
		t.Fatal("Take(-1) returned a buffer")
	}
}

func TestPutKeepsOnlyClassSizes(t *testing.T) {
	// A buffer whose capacity is not a class size is not kept: a Take
	// of that length never returns it.
	odd := make([]byte, 100<<10, 100<<10)
	odd[0] = 42
	Put(odd)
	for range 10 {
		if b, ok := Take(100 << 10); ok {
			if cap(b) != 128<<10+Slack {
				t.Fatalf("Take returned capacity %d", cap(b))
			}
		}
	}
	Put(make([]byte, Max+1)) // above Max: dropped, no panic
}

func TestLargeAllocationsArePlain(t *testing.T) {
	b := Get(Max + 10)
	if len(b) != Max+10 || cap(b) != Max+10 {
		t.Fatalf("Get above Max: len %d cap %d", len(b), cap(b))
	}
}

func BenchmarkGetPut4MiB(b *testing.B) {
	Poison(false)
	b.Cleanup(func() { Poison(true) })
	b.SetBytes(4 << 20)
	for b.Loop() {
		buf := Get(4 << 20)
		buf[0] = 1
		Put(buf)
	}
}

func BenchmarkMake4MiB(b *testing.B) {
	b.SetBytes(4 << 20)
	var sink []byte
	for b.Loop() {
		sink = make([]byte, 4<<20)
		sink[0] = 1
	}
	_ = sink
}

// Test binaries poison what goes back, so that a use after Put shows.
func TestPoison(t *testing.T) {
	if !poison.Load() {
		t.Fatal("a test binary does not poison buffers put back")
	}
	b := Get(Min)
	for i := range b {
		b[i] = 1
	}
	alias := b[:10]
	Put(b)
	for i, x := range alias {
		if x != 0xdb {
			t.Fatalf("byte %d after a poisoned Put: %#x", i, x)
		}
	}
}
