package cluster

import (
	"testing"

	"damselfly/rafs"
)

// With every scheduler down, peers keep serving each other from what they
// learnt recently and go to origin for the rest: no read fails.
func TestReadsWithoutAnyScheduler(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	files := im.regularFiles(t, 0)
	a, b := c.addNode("a", ""), c.addNode("b", "")
	a.mount(im, "").equalSource(im)

	mb := b.mount(im, "")
	half := len(files) / 2
	if failed := mb.readFiles(im, files[:half]); len(failed) > 0 {
		t.Fatalf("node B, scheduler up: %d reads failed: %v", len(failed), failed)
	}
	peersBefore, originBefore := b.peerBytes("peer"), b.peerBytes("origin")

	c.sched.p.kill()
	failed := mb.readFiles(im, files[half:])
	peers, origin := b.peerBytes("peer")-peersBefore, b.peerBytes("origin")-originBefore
	t.Logf("measured: scheduler down: node B read %d files, %d failed; %d bytes from peers, %d from origin",
		len(files)-half, len(failed), peers, origin)
	if len(failed) > 0 {
		t.Fatalf("node B, scheduler down: %d reads failed: %v", len(failed), failed)
	}
	if peers == 0 {
		t.Errorf("node B got nothing from the peer it learnt before the scheduler died")
	}
}
