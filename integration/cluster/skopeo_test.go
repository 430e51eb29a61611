package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/piece"
	"damselfly/rafs/rafstest"
)

// skopeoCopy copies the image's plain tag through node n's mirror into a
// new OCI layout and checks that every blob of the source is in it with
// the same bytes.
func skopeoCopy(t *testing.T, n *node, im *image) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mirror := strings.TrimPrefix(n.proxy, "http://")
	out, err := exec.CommandContext(ctx, "skopeo", "copy", "--src-tls-verify=false",
		"docker://"+mirror+"/"+im.repo+":plain", "oci:"+dst+":copy").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy through node %s's mirror: %v\n%s", n.name, err, out)
	}
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
			t.Fatalf("node %s: blob %s missing from the copy: %v", n.name, e.Name(), err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("node %s: blob %s differs in the copy", n.name, e.Name())
		}
	}
}

// plainBlobs returns the sizes of the config and layers of the source
// image (the blobs a pull fetches through /blobs/) and their piece count.
func plainBlobs(t *testing.T, im *image) (config int64, layers []int64, pieces int64) {
	t.Helper()
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	readJSON := func(p string, v any) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	readJSON(filepath.Join(im.layout, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("source layout has %d manifests, want 1", len(index.Manifests))
	}
	var m struct {
		Config struct{ Size int64 }   `json:"config"`
		Layers []struct{ Size int64 } `json:"layers"`
	}
	readJSON(filepath.Join(im.layout, "blobs", "sha256", strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")), &m)
	count := func(n int64) int64 { return (n + piece.DefaultSize - 1) / piece.DefaultSize }
	pieces = count(m.Config.Size)
	for _, l := range m.Layers {
		layers = append(layers, l.Size)
		pieces += count(l.Size)
	}
	return m.Config.Size, layers, pieces
}

// waitHeld waits until the scheduler knows that n holds at least want
// chunks (pieces count as chunks).
func (c *cluster) waitHeld(n *node, want int64) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var peers []struct {
			ID     string `json:"id"`
			Chunks int64  `json:"chunks"`
		}
		getJSON(c.t, c.sched.admin+"/api/v1/peers", &peers)
		for _, p := range peers {
			if p.ID == n.id && p.Chunks >= want {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the scheduler does not know of %d pieces held by node %s after 15s: %+v", want, n.name, peers)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Scenario 7: `skopeo copy` of a plain OCI image through node A's
// registry mirror endpoint gives the source's blobs byte for byte (from
// the registry); node B's copy after it is byte-identical too and its
// layers come from A's pieces, not the registry. Then A's cache is
// corrupted (A serves wrong pieces without checking them) and B stopped:
// node C still gets a byte-identical copy, reports A, and takes the
// pieces A spoilt from the registry, checked against A's table.
func TestSkopeoCopyThroughMirror(t *testing.T) {
	c := newCluster(t)
	rafstest.RequireTool(t, "skopeo")
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	config, layers, pieces := plainBlobs(t, im)
	var layerBytes int64
	for _, n := range layers {
		layerBytes += n
	}
	a := c.addNode("a", "exchange:\n  no_verify: true\n")
	b := c.addNode("b", "")

	skopeoCopy(t, a, im)
	c.waitHeld(a, pieces)
	skopeoCopy(t, b, im)
	fromPeers := b.metric("damselfly_proxy_plain_blob_piece_bytes_total")
	t.Logf("measured: %d layers (%d bytes) and a config of %d bytes in %d pieces; registry blob bytes: node A %d, node B %d; node B served %d blob bytes from pieces",
		len(layers), layerBytes, config, pieces, a.gate.blobBytes.Load(), b.gate.blobBytes.Load(), fromPeers)
	if got := a.gate.blobBytes.Load(); got < layerBytes {
		t.Errorf("node A got %d blob bytes from the registry, want at least the %d of the layers", got, layerBytes)
	}
	// The config is a blob too and normally comes from A as well; the
	// layers must.
	if got := b.gate.blobBytes.Load(); got > config {
		t.Errorf("node B got %d blob bytes from the registry, want at most the config's %d", got, config)
	}
	if fromPeers < layerBytes {
		t.Errorf("node B served %d blob bytes from pieces, want at least the %d of the layers", fromPeers, layerBytes)
	}

	// Only A holds the pieces now, and serves them spoilt.
	b.p.stop()
	n := corruptCache(t, a.cache)
	cn := c.addNode("c", "")
	skopeoCopy(t, cn, im)
	reports := cn.metric("damselfly_peer_bad_peer_reports_total")
	t.Logf("measured: %d pieces corrupted in node A's cache; node C: registry blob bytes %d, %d blob bytes from pieces, %d reports of bad peers",
		n, cn.gate.blobBytes.Load(), cn.metric("damselfly_proxy_plain_blob_piece_bytes_total"), reports)
	if reports == 0 {
		t.Errorf("node C reported no bad peer")
	}
}
