package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/testsuite"
	"github.com/containerd/containerd/v2/pkg/snapshotters"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// TestContainerdSuite runs containerd's own snapshotter conformance
// suite (prepare, view, commit, mounts, stat, update, usage, remove,
// walk, parent chains, 128-layer mounts...) against the snapshotter: for
// every image that is not RAFS it must be the overlayfs snapshotter. The
// suite is told it is "overlayfs", whose known limits (renaming a
// directory of a lower layer) it allows for by that name.
func TestContainerdSuite(t *testing.T) {
	rafstest.RequireRoot(t)
	testsuite.SnapshotterSuite(t, "overlayfs", func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
		cfg := Default()
		cfg.Root = root
		s, err := New(ctx, cfg, Options{})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	})
}

// testImage is a corpus image in an in-process registry, plain and
// converted to RAFS.
type testImage struct {
	host    string
	rafs    string // HOST/corpus/base:rafs, as CRI names it
	plain   string
	layers  []string // the RAFS manifest's layers: blobs, then the bootstrap
	digest  string   // the RAFS manifest's digest
	pdigest string
	player  string // the plain image's first layer
}

func pushTestImage(t *testing.T) *testImage {
	t.Helper()
	ctx := t.Context()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	var img rafstest.Image
	for _, i := range rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: rafs.MinChunkSize}) {
		if i.Name == "base-v1" {
			img = i
		}
	}
	if err := rafstest.WriteOCILayout(ctx, dir, img); err != nil {
		t.Fatal(err)
	}
	ti := &testImage{host: host, rafs: host + "/corpus/base:rafs", plain: host + "/corpus/base:plain"}
	res, err := convert.Convert(ctx, "oci:"+dir+":base-v1", "docker://"+ti.rafs,
		convert.Options{Build: rafs.BuildOptions{ChunkSize: rafs.MinChunkSize}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ti.digest = res.Digest
	src, err := transport.Parse("oci:"+dir+":base-v1", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := transport.ReadImage(ctx, src, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := transport.Parse("docker://"+ti.plain, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.WriteImage(ctx, dst, plain, transport.Options{}); err != nil {
		t.Fatal(err)
	}
	pm, err := plain.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := plain.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ti.pdigest, ti.player = pd.String(), pm.Layers[0].Digest.String()
	m := manifestOf(t, host+"/corpus/base@"+ti.digest)
	for _, l := range m.Layers {
		ti.layers = append(ti.layers, l.Digest.String())
	}
	return ti
}

func manifestOf(t *testing.T, ref string) *v1.Manifest {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newTestSnapshotter opens a snapshotter at root whose mount daemons are
// the fake one (main_test.go), with fail, if set, as their error.
func newTestSnapshotter(t *testing.T, root, fail string) *Snapshotter {
	t.Helper()
	cfg := Default()
	cfg.Root = root
	cfg.MountTimeout = 10 * time.Second
	cfg.StopTimeout = 5 * time.Second
	cfg.Mount.StartOnPull = 0 // TestStartOnPull sets its own
	s, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.daemons.command = func(st daemonState, mp, sock string) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "mount", st.Image, mp)
		cmd.Env = append(os.Environ(), fakeMountEnv+"=1", "DAMSELFLY_API_SOCKET="+sock)
		if fail != "" {
			cmd.Env = append(cmd.Env, "SNAPSHOTTER_TEST_FAKE_FAIL="+fail)
		}
		return cmd, nil
	}
	return s
}

// unpack does what containerd's unpacker does with the remote-snapshot
// labels: Prepare each layer on the last, expecting the snapshotter to
// commit it itself (ErrAlreadyExists). It returns the top snapshot.
func unpack(t *testing.T, s *Snapshotter, ref, manifest string, layers []string) string {
	t.Helper()
	parent := ""
	for i, l := range layers {
		target := manifest + "-chain-" + l
		labels := map[string]string{
			snapshots.LabelSnapshotRef:             target,
			snapshotters.TargetRefLabel:            ref,
			snapshotters.TargetManifestDigestLabel: manifest,
			snapshotters.TargetLayerDigestLabel:    l,
		}
		_, err := s.Prepare(t.Context(), "extract-"+target, parent, snapshots.WithLabels(labels))
		if !errdefs.IsAlreadyExists(err) {
			t.Fatalf("prepare of RAFS layer %d (%s): got %v, want ErrAlreadyExists", i, l, err)
		}
		info, err := s.Stat(t.Context(), target)
		if err != nil {
			t.Fatalf("remote snapshot of layer %d: %v", i, err)
		}
		want := layerBlob
		if i == len(layers)-1 {
			want = layerBootstrap
		}
		if info.Kind != snapshots.KindCommitted || info.Parent != parent || info.Labels[LabelLayer] != want || info.Labels[LabelManifest] != manifest || info.Labels[snapshots.LabelSnapshotRef] != target {
			t.Fatalf("remote snapshot of layer %d: got %+v, want a committed %s on %q with the labels", i, info, want, parent)
		}
		if _, err := s.Stat(t.Context(), "extract-"+target); !errdefs.IsNotFound(err) {
			t.Errorf("the extraction snapshot of layer %d is left: %v", i, err)
		}
		parent = target
	}
	return parent
}

// lowerOf returns the lowerdir of an overlay mount, or the source of a
// bind.
func lowerOf(t *testing.T, m []mount.Mount) string {
	t.Helper()
	if len(m) != 1 {
		t.Fatalf("got mounts %+v, want one", m)
	}
	if m[0].Type == "bind" {
		return m[0].Source
	}
	for _, o := range m[0].Options {
		if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
			return v
		}
	}
	t.Fatalf("no lowerdir in %+v", m)
	return ""
}

// TestRemoteSnapshots: RAFS layers are committed without download; the
// snapshots on the image mount its one daemon, which lives while they
// do, is adopted by a new snapshotter on the same root, is replaced when
// it dies, and stops with the last of them. A plain image's layers are
// ordinary snapshots.
func TestRemoteSnapshots(t *testing.T) {
	ti := pushTestImage(t)
	root := filepath.Join(t.TempDir(), "r")
	s := newTestSnapshotter(t, root, "")
	ctx := t.Context()
	top := unpack(t, s, ti.rafs, ti.digest, ti.layers)
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v after the unpack, want none until a container needs one", got)
	}

	// A plain image: containerd applies the layer itself.
	pl := map[string]string{
		snapshots.LabelSnapshotRef:             "plain-chain",
		snapshotters.TargetRefLabel:            ti.plain,
		snapshotters.TargetManifestDigestLabel: ti.pdigest,
		snapshotters.TargetLayerDigestLabel:    ti.player,
	}
	m, err := s.Prepare(ctx, "extract-plain", "", snapshots.WithLabels(pl))
	if err != nil {
		t.Fatalf("prepare of a plain layer: %v", err)
	}
	if len(m) != 1 || m[0].Type != "bind" {
		t.Errorf("plain layer mounts %+v, want overlayfs's bind of its directory", m)
	}
	if err := s.Commit(ctx, "plain-chain", "extract-plain"); err != nil {
		t.Fatal(err)
	}

	// Containers prepared at once, and a view, share one daemon.
	mp := filepath.Join(root, "mounts", daemonID(ti.digest), "mnt")
	var wg sync.WaitGroup
	mounts := make([][]mount.Mount, 4)
	errs := make([]error, len(mounts))
	for i := range mounts {
		wg.Go(func() { mounts[i], errs[i] = s.Prepare(ctx, fmt.Sprintf("ctr-%d", i+1), top) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("prepare ctr-%d: %v", i+1, err)
		}
	}
	if got := fakeDaemons(mp); len(got) != 1 {
		t.Fatalf("daemon processes %v for one image prepared by 4 containers at once, want 1", got)
	}
	for _, k := range []string{"ctr-3", "ctr-4"} {
		if err := s.Remove(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	m1 := mounts[0]
	if got := lowerOf(t, m1); got != mp {
		t.Errorf("container lowerdir %s, want the image's mount %s", got, mp)
	}
	if m1[0].Type != "overlay" || !strings.Contains(strings.Join(m1[0].Options, ","), "upperdir=") {
		t.Errorf("container mounts %+v, want an overlay with an upper", m1)
	}
	pids := s.Daemons()
	if len(pids) != 1 || pids[ti.digest] == 0 {
		t.Fatalf("daemons %v, want one for %s", pids, ti.digest)
	}
	v, err := s.View(ctx, "view-1", top)
	if err != nil {
		t.Fatal(err)
	}
	if v[0].Type != "bind" || v[0].Source != mp {
		t.Errorf("view mounts %+v, want a bind of %s", v, mp)
	}
	if got := s.Daemons(); got[ti.digest] != pids[ti.digest] || len(got) != 1 {
		t.Errorf("daemons %v with three snapshots on the image, want still %v", got, pids)
	}
	for _, k := range []string{"ctr-1", "view-1"} {
		if err := s.Remove(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Daemons(); got[ti.digest] != pids[ti.digest] {
		t.Errorf("daemons %v with ctr-2 left, want %v", got, pids)
	}

	// A new snapshotter on the same root adopts the daemon.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newTestSnapshotter(t, root, "")
	if got := s.Daemons(); got[ti.digest] != pids[ti.digest] {
		t.Fatalf("daemons %v after a restart, want the adopted %v", got, pids)
	}
	if m, err := s.Mounts(ctx, "ctr-2"); err != nil || lowerOf(t, m) != mp {
		t.Fatalf("mounts of ctr-2 after a restart: %+v, %v", m, err)
	}
	if got := s.Daemons(); got[ti.digest] != pids[ti.digest] {
		t.Errorf("daemons %v after Mounts, want the adopted %v, no second one", got, pids)
	}

	// A daemon that dies is replaced at its mountpoint, by the next
	// Mounts or by the periodic check.
	syscall.Kill(pids[ti.digest], syscall.SIGKILL)
	waitGone(t, pids[ti.digest])
	if err := s.syncDaemons(ctx, true); err != nil {
		t.Fatal(err)
	}
	replaced := s.Daemons()[ti.digest]
	if replaced == 0 || replaced == pids[ti.digest] {
		t.Fatalf("daemon %d after the old one was killed, want a new one", replaced)
	}
	if m, err := s.Mounts(ctx, "ctr-2"); err != nil || lowerOf(t, m) != mp {
		t.Fatalf("mounts of ctr-2 on the replaced daemon: %+v, %v", m, err)
	}

	// The last snapshot on the image goes: so does its daemon.
	if err := s.Remove(ctx, "ctr-2"); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v after the last container went, want none", got)
	}
	waitGone(t, replaced)
	if _, err := os.Stat(filepath.Join(root, "mounts", daemonID(ti.digest))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped daemon's directory is left: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStartOnPull: with Mount.StartOnPull, the pull of a RAFS image
// starts its daemon without waiting for it; the first container uses
// that daemon, and from then on it lives while snapshots stand on it.
// A pulled image no container uses has its daemon stopped once the
// time is up, by the periodic check, and not before.
func TestStartOnPull(t *testing.T) {
	ti := pushTestImage(t)
	root := filepath.Join(t.TempDir(), "r")
	s := newTestSnapshotter(t, root, "")
	defer s.Close()
	ctx := t.Context()
	s.startOnPull = time.Minute
	top := unpack(t, s, ti.rafs, ti.digest, ti.layers)
	pid := waitDaemon(t, s, ti.digest)

	if _, err := s.Prepare(ctx, "ctr-1", top); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 1 || got[ti.digest] != pid {
		t.Fatalf("daemons %v after the first container, want the one the pull started (%d)", got, pid)
	}
	// Used by a container: its removal stops the daemon at once, the
	// minute notwithstanding.
	if err := s.Remove(ctx, "ctr-1"); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 0 {
		t.Fatalf("daemons %v after the last container went, want none", got)
	}
	waitGone(t, pid)

	// Pulled again, never used: kept through checks within the time,
	// stopped by the first check after it (the time made to pass by
	// moving the daemon's keep into the past, not by sleeping).
	unpack(t, s, ti.rafs, ti.digest, ti.layers)
	pid = waitDaemon(t, s, ti.digest)
	if err := s.syncDaemons(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); got[ti.digest] != pid {
		t.Fatalf("daemons %v right after the pull, want %d kept for a first container", got, pid)
	}
	s.daemons.mu.Lock()
	for _, d := range s.daemons.m {
		if d.kept.IsZero() {
			t.Errorf("daemon %s not kept after a pull", d.id)
		}
		d.kept = time.Now().Add(-time.Millisecond)
	}
	s.daemons.mu.Unlock()
	if err := s.syncDaemons(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v after StartOnPull passed with no container, want none", got)
	}
	waitGone(t, pid)
}

// waitDaemon waits for the daemon of manifest to run and returns its pid.
func waitDaemon(t *testing.T, s *Snapshotter, manifest string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if pid := s.Daemons()[manifest]; pid != 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon for %s within 15s of the pull", manifest)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRemoteSnapshotFailures: what cannot be served lazily fails with
// an error that names it, and leaves no snapshot behind.
func TestRemoteSnapshotFailures(t *testing.T) {
	ti := pushTestImage(t)
	ctx := t.Context()

	t.Run("daemon fails", func(t *testing.T) {
		s := newTestSnapshotter(t, filepath.Join(t.TempDir(), "r"), "cannot mount: boom")
		defer s.Close()
		top := unpack(t, s, ti.rafs, ti.digest, ti.layers)
		_, err := s.Prepare(ctx, "ctr", top)
		if err == nil || !strings.Contains(err.Error(), "cannot mount: boom") {
			t.Fatalf("got %v, want the daemon's own error", err)
		}
		if _, err := s.Stat(ctx, "ctr"); !errdefs.IsNotFound(err) {
			t.Errorf("the container's snapshot is left after its image failed to mount: %v", err)
		}
	})

	t.Run("layer not in the manifest", func(t *testing.T) {
		s := newTestSnapshotter(t, filepath.Join(t.TempDir(), "r"), "")
		defer s.Close()
		bogus := "sha256:" + strings.Repeat("0", 64)
		_, err := s.Prepare(ctx, "extract", "", snapshots.WithLabels(map[string]string{
			snapshots.LabelSnapshotRef:             "chain",
			snapshotters.TargetRefLabel:            ti.rafs,
			snapshotters.TargetManifestDigestLabel: ti.digest,
			snapshotters.TargetLayerDigestLabel:    bogus,
		}))
		if !errors.Is(err, ErrNotInManifest) || !strings.Contains(err.Error(), bogus) {
			t.Fatalf("got %v, want ErrNotInManifest naming %s", err, bogus)
		}
	})

	t.Run("bootstrap missing", func(t *testing.T) {
		s := newTestSnapshotter(t, filepath.Join(t.TempDir(), "r"), "")
		defer s.Close()
		boot := ti.layers[len(ti.layers)-1]
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+ti.host+"/v2/corpus/base/blobs/"+boot, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("delete the bootstrap blob: %s", resp.Status)
		}
		parent := ""
		for _, l := range ti.layers {
			target := "chain-" + l
			_, err := s.Prepare(ctx, "extract-"+l, parent, snapshots.WithLabels(map[string]string{
				snapshots.LabelSnapshotRef:             target,
				snapshotters.TargetRefLabel:            ti.rafs,
				snapshotters.TargetManifestDigestLabel: ti.digest,
				snapshotters.TargetLayerDigestLabel:    l,
			}))
			if l != boot {
				if !errdefs.IsAlreadyExists(err) {
					t.Fatalf("blob layer: %v", err)
				}
				parent = target
				continue
			}
			if err == nil || errdefs.IsAlreadyExists(err) || !strings.Contains(err.Error(), "RAFS bootstrap layer "+boot) {
				t.Fatalf("got %v, want an error naming the bootstrap layer %s", err, boot)
			}
			if _, err := s.Stat(ctx, target); !errdefs.IsNotFound(err) {
				t.Errorf("a snapshot of the missing bootstrap exists: %v", err)
			}
		}
	})
}

// fakeDaemons returns the pids of live processes whose command line ends
// with mountpoint.
func fakeDaemons(mountpoint string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !pidAlive(pid) {
			continue
		}
		if ownsMount(pid, mountpoint) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestAdoptClearsWhatIsNotInUse: at start, a daemon directory with a
// damaged daemon.json, and one whose daemon is dead and whose image no
// snapshot uses, are removed; a live daemon nothing uses is stopped.
func TestAdoptClearsWhatIsNotInUse(t *testing.T) {
	root := filepath.Join(t.TempDir(), "r")
	s := newTestSnapshotter(t, root, "")
	manifest := "sha256:" + strings.Repeat("ab", 32)
	if _, err := s.daemons.ensure(t.Context(), manifest, "docker://127.0.0.1:1/app@"+manifest); err != nil {
		t.Fatal(err)
	}
	live := s.Daemons()[manifest]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mounts := filepath.Join(root, "mounts")
	for id, state := range map[string]string{
		"0123456789abcdef": "{not json",
		"fedcba9876543210": `{"manifest":"sha256:fedcba9876543210` + strings.Repeat("0", 48) + `","image":"docker://h/a@x","pid":999999999}`,
	} {
		if err := os.MkdirAll(filepath.Join(mounts, id, "mnt"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mounts, id, "daemon.json"), []byte(state), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s = newTestSnapshotter(t, root, "")
	defer s.Close()
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v, want none: no snapshot uses any image", got)
	}
	waitGone(t, live)
	entries, err := os.ReadDir(mounts)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in mounts/: %s", e.Name())
	}
}

// waitGone waits for pid to exit.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
