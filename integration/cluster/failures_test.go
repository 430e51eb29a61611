package cluster

import (
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

// Scenario 4: a peer is killed while another node reads from it, and the
// scheduler is killed and restarted with empty state: every read
// succeeds, and the restarted scheduler learns the holdings again from the
// peers' re-announcements.
func TestPeerKilledAndSchedulerRestarted(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	files := im.regularFiles(t, 0)
	a, b, n3 := c.addNode("a", ""), c.addNode("b", ""), c.addNode("c", "")

	a.mount(im, "").equalSource(im)
	mb := b.mount(im, "")
	type result struct {
		failed map[string]error
		err    error
	}
	done := make(chan result, 1)
	go func() {
		failed, err := mb.readFilesErr(im, files)
		done <- result{failed, err}
	}()
	// Kill A's peer once B is getting bytes from it.
	deadline := time.Now().Add(30 * time.Second)
	for b.peerBytes("peer") == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !listed(t, c.sched, a.id) {
		t.Fatalf("the scheduler does not list peer A, which B is reading from")
	}
	a.p.kill()
	killedAt := b.peerBytes("peer")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("measured: peer A killed after B got %d bytes from peers; B read %d files, %d failed; B %d bytes from peers, %d from origin in all",
		killedAt, len(files), len(r.failed), b.peerBytes("peer"), b.peerBytes("origin"))
	if len(r.failed) > 0 {
		t.Fatalf("node B: %d reads failed after peer A was killed: %v", len(r.failed), r.failed)
	}
	// A's heartbeats stopped with it: the scheduler drops A, and with it
	// everything A held, after the peer TTL (3 s here).
	gone := time.Now()
	rafstest.Eventually(t, 15*time.Second, "the scheduler to drop killed peer A", func() bool { return !listed(t, c.sched, a.id) })
	t.Logf("measured: the scheduler dropped killed peer A %s after B's reads ended", time.Since(gone).Round(time.Millisecond))

	c.sched.restart()
	restarted := time.Now()
	// B holds the whole image now; the empty scheduler must learn it from
	// B's re-registration and re-announcement.
	var held int64
	for time.Since(restarted) < 15*time.Second {
		var peers []struct {
			ID     string `json:"id"`
			Chunks int64  `json:"chunks"`
		}
		getJSON(t, c.sched.admin+"/api/v1/peers", &peers)
		for _, p := range peers {
			if p.ID == b.id {
				held = p.Chunks
			}
		}
		if held > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("measured: restarted scheduler knew B's %d chunks after %s", held, time.Since(restarted).Round(time.Millisecond))
	if held == 0 {
		t.Fatalf("the restarted scheduler did not learn B's holdings within 15s")
	}
	mc := n3.mount(im, "")
	mc.equalSource(im)
	t.Logf("measured: node C after the restart: %d bytes from peers, %d from origin", n3.peerBytes("peer"), n3.peerBytes("origin"))
	if n3.peerBytes("peer") == 0 {
		t.Errorf("node C got nothing from peers after the scheduler restart")
	}
}

// listed reports whether the scheduler's admin API lists peer id.
func listed(t *testing.T, s *scheduler, id string) bool {
	t.Helper()
	var peers []struct {
		ID string `json:"id"`
	}
	getJSON(t, s.admin+"/api/v1/peers", &peers)
	for _, p := range peers {
		if p.ID == id {
			return true
		}
	}
	return false
}
