package cluster

import (
	"testing"

	"damselfly/rafs"
)

// Scenario 2: after node A has read the image, node B reads it with no
// chunk bytes from the registry: they all come from A.
func TestSecondNodeReadsFromFirst(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	a, b := c.addNode("a", ""), c.addNode("b", "")

	ma := a.mount(im, "")
	ma.equalSource(im)
	aRegistry := a.gate.blobBytes.Load()

	mb := b.mount(im, "")
	// Mounting fetched the manifest and the bootstrap; count from here.
	before := b.gate.blobBytes.Load()
	mb.equalSource(im)
	fromRegistry := b.gate.blobBytes.Load() - before
	fromPeers := b.peerBytes("peer")
	t.Logf("measured: node A %d registry bytes; node B %d chunk bytes from peers, %d from the registry", aRegistry, fromPeers, fromRegistry)
	if fromRegistry != 0 {
		t.Errorf("node B fetched %d chunk bytes from the registry, want 0", fromRegistry)
	}
	if fromPeers == 0 {
		t.Errorf("node B got no bytes from peers")
	}
	if st := mb.status(); st.Errors != 0 || st.Verify != 0 {
		t.Errorf("node B: %d read errors, %d verification failures, want none", st.Errors, st.Verify)
	}
}
