package cluster

import (
	"testing"

	"damselfly/rafs"
)

// Scenario 1: a lazy mount, read in full, equals the source image as
// umoci unpacks it, on every node.
func TestLazyMountEqualsSourceOnEveryNode(t *testing.T) {
	c := newCluster(t)
	imgs := []*image{
		pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize),
		pushImage(t, c.reg, "whiteouts", corpusImage(t, "whiteouts"), rafs.MinChunkSize),
		pushImage(t, c.reg, "hardlinks", corpusImage(t, "hardlinks"), rafs.MinChunkSize),
	}
	for _, name := range []string{"a", "b"} {
		n := c.addNode(name, "")
		for _, im := range imgs {
			m := n.mount(im, "")
			m.equalSource(im)
			m.unmount()
		}
	}
}
