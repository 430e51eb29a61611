package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"damselfly/integration/harness"
)

// Scenario (issue 22, item 4): a private RAFS image, and a node whose
// docker config has no credentials for it. The kubelet's pulls go to the
// snapshotter's CRI ImageService (cri.listen), which forwards them to
// containerd's CRI: a pull without credentials fails (the registry
// refuses containerd), one with them succeeds without downloading a RAFS
// blob, and a container of the image reads its file through a mount
// daemon that has only those credentials (its own docker config), via
// the node's peer, which checks them with the registry.
func TestSnapshotterCRICredentials(t *testing.T) {
	requireContainerd(t)
	c := newClusterOf(t, "", true)
	n := c.addNode("a", "")
	im := pushLazy(t, c.reg)
	const user, pass = "kubelet", "pull-secret"
	c.reg.requireAuth(user, pass)
	// The node has no credentials of its own: an empty docker config
	// for the snapshotter and everything it starts.
	t.Setenv("DOCKER_CONFIG", t.TempDir())

	criSock := filepath.Join(t.TempDir(), "cri.sock")
	// containerd's socket is named before either starts: each names the
	// other's, and both connect on first use.
	ctrdSock := filepath.Join(t.TempDir(), "c.sock")
	sn := startSnapshotterWith(t, n, fmt.Sprintf("cri:\n  listen: %s\n  image_service: %s\n", criSock, ctrdSock))
	if line, err := sn.p.LogLine("cri image service "); err != nil || line == "" {
		t.Fatalf("the snapshotter did not say it serves the CRI ImageService (%v)", err)
	}
	// containerd's CRI plugin pulls into the damselfly snapshotter with
	// the remote-snapshot annotations, as configs/containerd/config.toml
	// sets it for the kubelet.
	ctrd := startContainerdWith(t, "cri", "", harness.ContainerdConfig{Socket: ctrdSock,
		Snapshotters: map[string]string{"damselfly": sn.sock}, CRI: true, CRISnapshotter: "damselfly"})

	conn, err := grpc.NewClient("unix://"+criSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kubelet := runtimeapi.NewImageServiceClient(conn)
	ref := c.reg.host + "/" + im.repo + ":rafs"
	pull := func(auth *runtimeapi.AuthConfig) error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		_, err := kubelet.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth})
		return err
	}

	if err := pull(nil); err == nil {
		t.Fatalf("a pull of the private image without credentials succeeded")
	} else {
		t.Logf("without credentials: %v", err)
	}
	since := c.reg.logOffset()
	if err := pull(&runtimeapi.AuthConfig{Username: user, Password: pass}); err != nil {
		t.Fatalf("pull with the kubelet's credentials: %v\n--- snapshotter:\n%s", err, sn.p.LogTail(4000))
	}
	served := c.reg.blobsServed(since)
	for d := range im.blobs {
		if b := served[d]; b.bytes > 0 {
			t.Errorf("the CRI pull fetched %d bytes of RAFS blob %s, want none", b.bytes, d)
		}
	}
	if b := served[im.bootstrap]; b.bytes == 0 {
		t.Errorf("the snapshotter did not fetch the bootstrap %s with the pull's credentials", im.bootstrap)
	}
	if st, err := kubelet.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil || st.Image == nil {
		t.Errorf("ImageStatus through the snapshotter: %v, %v; want the pulled image", st, err)
	}

	// A container of the image CRI pulled (namespace k8s.io).
	cl := newCtrdClientIn(t, ctrd, "k8s.io")
	img, err := cl.c.GetImage(cl.ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := cl.run("cri-lazy", img, "damselfly").wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("container printed %q, want %q\n--- snapshotter:\n%s", got, im.want, sn.p.LogTail(4000))
	}
	entries, err := os.ReadDir(filepath.Join(sn.root, "mounts"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("mount daemon directories: %v, %v; want one", entries, err)
	}
	dc := filepath.Join(sn.root, "mounts", entries[0].Name(), "docker", "config.json")
	if st, err := os.Stat(dc); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the mount daemon's docker config %s: %v, %v; want a file of mode 0600", dc, st, err)
	} else if data, _ := os.ReadFile(dc); !strings.Contains(string(data), c.reg.host) || strings.Count(string(data), "auth\"") != 1 {
		t.Errorf("the mount daemon's docker config holds %d bytes that are not one entry for %s", len(data), c.reg.host)
	}
	cl.removeAll()
}
