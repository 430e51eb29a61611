package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

// Scenario 7: `skopeo copy` of a plain OCI image through a node's
// registry mirror endpoint gives the source's blobs byte for byte.
func TestSkopeoCopyThroughMirror(t *testing.T) {
	c := newCluster(t)
	rafstest.RequireTool(t, "skopeo")
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	a := c.addNode("a", "")

	dst := filepath.Join(t.TempDir(), "copy")
	mirror := strings.TrimPrefix(a.proxy, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "skopeo", "copy", "--src-tls-verify=false",
		"docker://"+mirror+"/"+im.repo+":plain", "oci:"+dst+":copy").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy through the mirror: %v\n%s", err, out)
	}
	// Every blob of the source layout (layers, config, manifest) is in
	// the copy with the same bytes.
	srcBlobs := filepath.Join(im.layout, "blobs", "sha256")
	ents, err := os.ReadDir(srcBlobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		want, err := os.ReadFile(filepath.Join(srcBlobs, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dst, "blobs", "sha256", e.Name()))
		if err != nil {
			t.Fatalf("blob %s missing from the copy: %v", e.Name(), err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("blob %s differs in the copy", e.Name())
		}
	}
	t.Logf("measured: %d blobs identical; %d blob bytes through node A's gate", len(ents), a.gate.blobBytes.Load())
}
