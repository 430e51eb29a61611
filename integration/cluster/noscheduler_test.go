package cluster

import (
	"testing"

	"damselfly/rafs"
)

// With every scheduler down, peers keep serving each other from what they
// learnt recently and go to origin for the rest: no read fails. Node A
// reads three quarters of the files; node B reads the first quarter with
// the scheduler up, then the rest with it killed: what A read is A's to
// serve, the last quarter nobody holds, so it must come from the origin.
func TestReadsWithoutAnyScheduler(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	files := im.regularFiles(t, 0)
	a, b := c.addNode("a", ""), c.addNode("b", "")
	if failed := a.mount(im, "").readFiles(im, files[:3*len(files)/4]); len(failed) > 0 {
		t.Fatalf("node A: %d reads failed: %v", len(failed), failed)
	}

	// B fetches only the chunks it reads (no merging of adjacent chunks,
	// no readahead), so that what it reads after the scheduler died is
	// not in its cache already, whatever its first reads pulled in.
	mb := b.mount(im, "advanced:\n  amplify_io: 4096\n  readahead_chunks: 0")
	quarter := len(files) / 4
	if failed := mb.readFiles(im, files[:quarter]); len(failed) > 0 {
		t.Fatalf("node B, scheduler up: %d reads failed: %v", len(failed), failed)
	}
	peersBefore, originBefore := b.peerBytes("peer"), b.peerBytes("origin")

	c.sched.p.kill()
	failed := mb.readFiles(im, files[quarter:])
	peers, origin := b.peerBytes("peer")-peersBefore, b.peerBytes("origin")-originBefore
	t.Logf("measured: scheduler down: node B read %d files, %d failed; %d bytes from peers, %d from origin",
		len(files)-quarter, len(failed), peers, origin)
	if len(failed) > 0 {
		t.Fatalf("node B, scheduler down: %d reads failed: %v", len(failed), failed)
	}
	if peers == 0 {
		t.Errorf("node B got nothing from the peer it learnt before the scheduler died")
	}
	if origin == 0 {
		t.Errorf("node B got nothing from the origin, yet read files nobody held")
	}
}
