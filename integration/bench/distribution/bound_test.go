package main

import (
	"math"
	"testing"

	"go.uber.org/goleak"

	"damselfly/rafs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFloor(t *testing.T) {
	t.Parallel()
	const (
		mib  = 1 << 20
		r200 = 200e6 / 8 // 200 Mbit/s in bytes/s
	)
	tests := []struct {
		name         string
		p2p          bool
		nodes        int
		image, chunk int64
		node, origin float64
		want         float64
		binding      string
	}{
		{"p2p, equal links: the node's link plus one relayed chunk", true, 8, 64 * mib, mib, r200, r200,
			64*mib/r200 + mib/r200, "node link"},
		{"p2p, slow origin binds", true, 8, 64 * mib, mib, r200, r200 / 4,
			4*64*mib/r200 + mib/r200, "origin link"},
		{"p2p, one node relays nothing", true, 1, 64 * mib, mib, r200, r200, 64 * mib / r200, "node link"},
		{"origin only: the origin sends one copy per node", false, 8, 64 * mib, mib, r200, r200, 8 * 64 * mib / r200, "origin link"},
		{"origin only, fast origin: the node's link", false, 8, 64 * mib, mib, r200, 100 * r200, 64 * mib / r200, "node link"},
		{"unshaped nodes: the origin alone", true, 4, 64 * mib, mib, 0, r200, 64 * mib / r200, "origin link"},
		{"nothing shaped", true, 4, 64 * mib, mib, 0, 0, 0, "none (unshaped)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := floor(tt.p2p, tt.nodes, tt.image, tt.chunk, tt.node, tt.origin)
			if math.Abs(got.Seconds-tt.want) > 1e-9 || got.Binding != tt.binding {
				t.Errorf("got %.6f s (%s), want %.6f s (%s)", got.Seconds, got.Binding, tt.want, tt.binding)
			}
		})
	}
}

func TestPercentileMedian(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3, 10, 6, 7, 8, 9}
	for _, tt := range []struct {
		q    float64
		want float64
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := percentile(xs, tt.q); got != tt.want {
			t.Errorf("percentile(%v): got %v, want %v", tt.q, got, tt.want)
		}
	}
	if xs[0] != 5 {
		t.Errorf("percentile sorted its input")
	}
	if got := median(xs); got != 5.5 {
		t.Errorf("median of 10: got %v, want 5.5", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3: got %v, want 2", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of none: got %v, want 0", got)
	}
}

func TestUnitsAndRotate(t *testing.T) {
	t.Parallel()
	img := &image{blobs: []blobChunks{{chunks: make([]rafs.Chunk, 5)}, {chunks: make([]rafs.Chunk, 3)}}}
	for _, b := range img.blobs {
		for i := range b.chunks {
			b.chunks[i].CompressedSize = 10
			b.chunks[i].Ordinal = uint32(i)
		}
	}
	us := units(img, 2)
	var sizes []int
	for _, u := range us {
		sizes = append(sizes, u.bytes)
	}
	want := []int{20, 20, 10, 20, 10}
	if len(sizes) != len(want) {
		t.Fatalf("got %d units %v, want %v", len(sizes), sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("got unit sizes %v, want %v", sizes, want)
		}
	}
	r := rotate(us, 7)
	if len(r) != len(us) || r[0].chunks[0].Ordinal != us[2].chunks[0].Ordinal || &r[3].chunks[0] != &us[0].chunks[0] {
		t.Errorf("rotate by 7 of 5 did not start at unit 2 and wrap around")
	}
	if len(us) != 5 || &us[0].chunks[0] != &img.blobs[0].chunks[0] {
		t.Errorf("rotate changed its input")
	}
}

func TestDownlinkStartsEmpty(t *testing.T) {
	t.Parallel()
	us := []unit{{bytes: 4 << 20}, {bytes: 1 << 20}}
	if lim := downlink(0, us); lim != nil {
		t.Errorf("unshaped: got a limiter, want nil")
	}
	lim := downlink(25e6, us)
	if lim.Burst() != 4<<20 {
		t.Errorf("burst: got %d, want the largest unit, %d", lim.Burst(), 4<<20)
	}
	if tok := lim.Tokens(); tok > float64(lim.Burst())/2 {
		t.Errorf("a new downlink holds %.0f tokens, want it to start about empty", tok)
	}
}
