package cluster

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// Scenario 5: a peer serves corrupt bytes (its node cache holds wrong
// bytes under the right digests, with valid checksums, and it does not
// check what it sends): the node reading from it catches every chunk,
// reports the peer, which the scheduler bans (ban_quorum is 1 in this
// cluster), and no bad byte reaches a reader.
func TestCorruptPeerIsBanned(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	bad := c.addNode("bad", "exchange:\n  no_verify: true\n")
	b := c.addNode("b", "")

	bad.mount(im, "").equalSource(im)
	n := corruptCache(t, bad.cache)
	t.Logf("corrupted %d chunks in the node cache of %s", n, bad.name)

	mb := b.mount(im, "")
	mb.equalSource(im)
	st := mb.status()
	t.Logf("measured: node B: %d bytes from peers, %d from origin; %d reports of bad peers; mount verification failures %d, read errors %d",
		b.peerBytes("peer"), b.peerBytes("origin"), b.metric("damselfly_peer_bad_peer_reports_total"), st.Verify, st.Errors)
	if st.Errors != 0 {
		t.Errorf("node B's mount had %d read errors, want none", st.Errors)
	}
	if b.metric("damselfly_peer_bad_peer_reports_total") == 0 {
		t.Errorf("node B reported no bad peer")
	}
	// Reports reach the scheduler in the background: wait for the ban.
	deadline := time.Now().Add(15 * time.Second)
	for {
		bans := c.sched.bans()
		if slices.Contains(bans, bad.id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler bans %v, want %s among them", bans, bad.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// corruptCache rewrites every chunk in the node cache at dir with bytes
// of the same length that do not match its digest, through the cache's
// own API (so the entries' checksums are valid and the peer serves them).
func corruptCache(t *testing.T, dir string) int {
	t.Helper()
	cc, err := cache.Open(cache.Default(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	n := 0
	for _, d := range cc.Keys() {
		m, stored, err := cc.Get(d, nil)
		if err != nil {
			continue
		}
		junk := bytes.Repeat([]byte{0x5a}, len(stored))
		if err := cc.Remove(d); err != nil {
			t.Fatal(err)
		}
		if err := cc.Put(d, m, junk); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no chunk to corrupt in the node cache")
	}
	return n
}
