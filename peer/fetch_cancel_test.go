package peer

import (
	"context"
	"slices"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
	"damselfly/scheduler"
)

// A read given up while its node holds origin turns gives the turns back
// at once, those of origin requests in flight and of those still queued
// behind them alike: another peer asking for the chunks gets the turns
// within moments, not after OriginTimeout. A mount that goes away in the
// middle of its reads left the other nodes reading the image waiting for
// that long.
func TestCancelledReadGivesUpOriginTurns(t *testing.T) {
	t.Parallel()
	img := buildImage(t)
	o := newOrigin(t, img.dir)
	o.delay.Store(int64(time.Second)) // A's first request is in flight when its read is given up
	st := newSchedulerWith(t, func(c *scheduler.Config) {
		c.OriginFetchers = 1
		c.OriginTimeout = time.Minute
	})
	a := newNode(t, clusterKey(t), st, nodeOpts{cfg: func(c *NodeConfig) {
		c.MaxParallelOrigin = 1 // the other runs wait for it
		c.OriginMaxRange = 1 << 10
	}})
	cs := img.chunks[:4]
	ords := make([]uint32, len(cs))
	for i, c := range cs {
		ords[i] = c.Ordinal
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err := readAll(ctx, a.Node, o.ref(), img.blob, cs)
	cancel()
	if err == nil {
		t.Fatal("read done before it was given up; the test needs it in progress")
	}
	const other = "other-peer"
	if err := st.Register(other, scheduler.PeerInfo{Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rafstest.Eventually(t, 20*time.Second, "another peer to get the origin turns A's read left", func() bool {
		ans, err := st.Parents(other, img.blob, ords, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return slices.Equal(slices.Sorted(slices.Values(ans.Origin)), ords)
	})
}
