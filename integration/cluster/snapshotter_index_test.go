package cluster

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/image-spec/identity"

	"damselfly/fusemount/snapshotter"
	"damselfly/integration/harness"
)

// Scenario (issue 22): a `convert --index` image pulled by its index tag
// as CRI pulls it (the remote-snapshot labels, containerd's own platform
// match) through `damselfly snapshotter`. containerd picks the original
// manifest, whose platform has no features; the snapshotter finds the
// RAFS manifest converted from it in the same index and serves the
// original's layers from it: no gzip layer is downloaded, the top
// layer's snapshot is the RAFS image's bootstrap layer, the container
// prints its file's digest through the lazy mount, and the daemon stops
// with the container. Then a plain image that shares the original's
// base layer is pulled into the same namespace: containerd reuses the
// base layer's snapshot by its chain ID without asking, so the
// snapshotter fills that (empty) snapshot from the layer's blob when the
// plain image's next layer is stacked on it, and the plain container
// runs its program from the base layer.
func TestSnapshotterServesIndexBySibling(t *testing.T) {
	requireContainerd(t)
	c := newClusterOf(t, "", true)
	n := c.addNode("a", "")
	im := pushLazy(t, c.reg)
	sn := startSnapshotter(t, n)
	ctrd := startContainerdWith(t, "sn", t.TempDir(), harness.ContainerdConfig{Snapshotters: map[string]string{"damselfly": sn.sock}})
	cl := newCtrdClient(t, ctrd)

	idxRef := c.reg.host + "/" + im.repo + ":idx"
	since := c.reg.logOffset()
	start := time.Now()
	img, err := cl.pull(idxRef, "damselfly", true)
	if err != nil {
		t.Fatalf("pull %s through the snapshotter: %v\n--- snapshotter:\n%s", idxRef, err, sn.p.LogTail(4000))
	}
	pullTime := time.Since(start)
	served := c.reg.blobsServed(since)
	for d := range im.plain {
		if b := served[d]; b.bytes > 0 {
			t.Errorf("the pull of the index fetched %d bytes of gzip layer %s (%+v), want none", b.bytes, d, b)
		}
	}
	if b := served[im.bootstrap]; b.bytes == 0 {
		t.Errorf("the pull did not fetch the RAFS sibling's bootstrap %s", im.bootstrap)
	}
	// containerd unpacked the original manifest; its top snapshot is
	// the sibling's bootstrap layer.
	ctx := cl.ctx
	cf, err := img.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	top := identity.ChainID(cf.RootFS.DiffIDs).String()
	info, err := cl.c.SnapshotService("damselfly").Stat(ctx, top)
	if err != nil {
		t.Fatalf("the original image's top snapshot %s: %v", top, err)
	}
	if info.Labels[snapshotter.LabelLayer] != "bootstrap" || info.Labels[snapshotter.LabelManifest] != im.rafs {
		t.Errorf("top snapshot labels %v, want the bootstrap layer of %s", info.Labels, im.rafs)
	}

	start = time.Now()
	got := cl.run("idx-once", img, "damselfly").wait(time.Minute)
	if got != im.want+"\nlazy: wrote" {
		t.Fatalf("container printed %q, want %q\n--- snapshotter:\n%s", got, im.want, sn.p.LogTail(4000))
	}
	runTime := time.Since(start)
	served = c.reg.blobsServed(since)
	for d := range im.plain {
		if b := served[d]; b.bytes > 0 {
			t.Errorf("running the container fetched %d bytes of gzip layer %s, want none", b.bytes, d)
		}
	}
	for d := range im.blobs {
		if b := served[d]; b.full > 0 {
			t.Errorf("RAFS blob %s was downloaded whole (%+v), want ranges only", d, b)
		}
	}
	if b := served[im.unread]; b.bytes > 0 {
		t.Errorf("the registry served %d bytes of the blob nobody read (%s), want 0", b.bytes, im.unread)
	}
	var rafsBytes int64
	for d := range im.blobs {
		rafsBytes += served[d].bytes
	}
	t.Logf("measured: index pull through the snapshotter %v, first container run %v; the registry served %d bytes of RAFS blobs (by range) and none of the gzip layers",
		pullTime.Round(time.Millisecond), runTime.Round(time.Millisecond), rafsBytes)
	if pids := mountDaemons(sn.root); len(pids) != 1 {
		t.Errorf("mount daemons %v while the container exists, want 1", pids)
	}
	cl.removeAll()
	deadline := time.Now().Add(30 * time.Second)
	for len(mountDaemons(sn.root)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := mountDaemons(sn.root); len(left) > 0 {
		t.Errorf("mount daemons %v after the container was removed, want none", left)
	}

	// A plain image on the original's base layer (the program), with a
	// data layer of its own.
	plainRef, want, base := pushSharedBase(t, c.reg, im)
	since = c.reg.logOffset()
	start = time.Now()
	plainImg, err := cl.pull(plainRef, "damselfly", true)
	if err != nil {
		t.Fatalf("pull %s through the snapshotter: %v\n--- snapshotter:\n%s", plainRef, err, sn.p.LogTail(4000))
	}
	t.Logf("measured: pull of the plain image on the shared base (its fill included) %v", time.Since(start).Round(time.Millisecond))
	got = cl.run("shared-base", plainImg, "damselfly").wait(time.Minute)
	if got != want+"\nlazy: wrote" {
		t.Fatalf("container of the plain image on the shared base printed %q, want %q\n--- snapshotter:\n%s", got, want, sn.p.LogTail(4000))
	}
	if line, err := sn.p.LogLine("source layer filled"); err != nil || line == "" {
		t.Errorf("the snapshotter did not log that it filled the shared base layer (%v)", err)
	}
	served = c.reg.blobsServed(since)
	if b := served[base]; b.bytes < im.plain[base] {
		t.Errorf("the registry served %d bytes of the shared base layer %s, want all %d (its fill)", b.bytes, base, im.plain[base])
	}
	if pids := mountDaemons(sn.root); len(pids) != 0 {
		t.Errorf("mount daemons %v for a plain image, want none", pids)
	}
	// The index image runs again on its own chain, the sibling's mount.
	if got := cl.run("idx-again", img, "damselfly").wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("index image after the fill printed %q, want %q", got, im.want)
	}
	cl.removeAll()
}

// pushSharedBase pushes tag shared: a plain image whose first layer is
// the lazy image's (the program) and whose second holds its own
// /data/blob. It returns the reference, the line the program prints
// and the digest of the shared layer.
func pushSharedBase(t *testing.T, reg *registry, im *lazyImage) (string, string, string) {
	t.Helper()
	src, err := name.ParseReference(reg.host+"/"+im.repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	v1img, err := remote.Image(src, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := v1img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<10)
	rand.NewChaCha8([32]byte{'s', 'h', 'a', 'r', 'e', 'd'}).Read(data)
	img := programImage(t, "/lazy", layers[0],
		gzipLayer(t, tarEntry{name: "data/", mode: 0o755, dir: true}, tarEntry{name: "data/blob", mode: 0o644, body: data}))
	dst := src.Context().Tag("shared")
	if err := remote.Write(dst, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", dst, err)
	}
	d, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return reg.host + "/" + im.repo + ":shared", fmt.Sprintf("lazy: /data/blob sha256:%x", sha256.Sum256(data)), d.String()
}
