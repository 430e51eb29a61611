package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/snapshotters"
	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

func TestFindSibling(t *testing.T) {
	t.Parallel()
	orig := digest('o').String()
	feature := &v1.Platform{OS: "linux", Architecture: "amd64", Features: []string{rafs.PlatformFeature}}
	plain := &v1.Platform{OS: "linux", Architecture: "amd64"}
	rafsOf := func(source string) *v1.Manifest {
		return &v1.Manifest{
			Annotations: map[string]string{rafs.AnnotationVersion: "1", rafs.AnnotationSource: source},
			Layers: []v1.Descriptor{
				{MediaType: types.MediaType(rafs.MediaTypeBlob), Digest: digest('b')},
				{MediaType: types.MediaType(rafs.MediaTypeBootstrap), Digest: digest('c')},
			},
		}
	}
	manifests := map[string]*v1.Manifest{
		digest('r').String(): rafsOf(orig),
		digest('x').String(): rafsOf(digest('9').String()),
		// Claims the source but is no RAFS manifest.
		digest('p').String(): {Annotations: map[string]string{rafs.AnnotationSource: orig},
			Layers: []v1.Descriptor{{MediaType: types.OCILayer, Digest: digest('l')}}},
	}
	read := func(_ context.Context, d string) (*v1.Manifest, error) {
		if m, ok := manifests[d]; ok {
			return m, nil
		}
		return nil, fmt.Errorf("manifest %s: boom", d)
	}
	desc := func(c byte, p *v1.Platform) v1.Descriptor {
		return v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: digest(c), Platform: p}
	}
	for _, tt := range []struct {
		name    string
		entries []v1.Descriptor
		want    string
		err     string
	}{
		{"sibling", []v1.Descriptor{desc('o', plain), desc('r', feature)}, digest('r').String(), ""},
		{"sibling after another image's", []v1.Descriptor{desc('o', plain), desc('x', feature), desc('r', feature)}, digest('r').String(), ""},
		{"annotation names another source", []v1.Descriptor{desc('o', plain), desc('x', feature)}, "", ""},
		{"no platform feature", []v1.Descriptor{desc('o', plain), desc('r', plain)}, "", ""},
		{"not RAFS", []v1.Descriptor{desc('o', plain), desc('p', feature)}, "", ""},
		{"index without the unpacked manifest", []v1.Descriptor{desc('q', plain), desc('r', feature)}, "", errIndexMoved.Error()},
		{"RAFS manifest unreadable", []v1.Descriptor{desc('o', plain), desc('u', feature)}, "", "boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findSibling(t.Context(), &v1.IndexManifest{Manifests: tt.entries}, orig, read)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// siblingScene is an original image of three layers (base, the base
// again, app), its RAFS sibling and the index of both under tag idx.
type siblingScene struct {
	reg      *fakeRegistry
	repo     string // docker://reg.test/app
	ref      string // reg.test/app:idx, as CRI passes it
	orig     string // the original manifest's digest
	rafs     string // the sibling's digest
	layers   []fakeLayer
	chain    []string // chain IDs of the original's layers
	baseFile string   // the base layer's file and its content
}

func newSiblingScene(t *testing.T) *siblingScene {
	t.Helper()
	base := newFakeLayer(t, map[string]string{"base.txt": "base layer"})
	app := newFakeLayer(t, map[string]string{"app.txt": "app layer"})
	sc := &siblingScene{repo: "docker://reg.test/app", ref: "reg.test/app:idx", layers: []fakeLayer{base, base, app}, baseFile: "base.txt"}
	cf := &v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}}
	om := &v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for _, l := range sc.layers {
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, l.diffID)
		om.Layers = append(om.Layers, v1.Descriptor{MediaType: types.OCILayer, Digest: l.digest, Size: int64(len(l.blob))})
	}
	sc.chain = chainIDs(cf)
	sc.orig = digest('e').String()
	sc.rafs = digest('f').String()
	rm := &v1.Manifest{
		Annotations: map[string]string{rafs.AnnotationVersion: "1", rafs.AnnotationSource: sc.orig},
		Layers: []v1.Descriptor{
			{MediaType: types.MediaType(rafs.MediaTypeBlob), Digest: digest('b')},
			{MediaType: types.MediaType(rafs.MediaTypeBootstrap), Digest: digest('c')},
		},
	}
	sc.reg = &fakeRegistry{
		manifests: map[string]*v1.Manifest{sc.repo + "@" + sc.orig: om, sc.repo + "@" + sc.rafs: rm},
		configs:   map[string]*v1.ConfigFile{sc.repo + "@" + sc.orig: cf},
		indexes: map[string]*v1.IndexManifest{"docker://" + sc.ref: {Manifests: []v1.Descriptor{
			{MediaType: types.OCIManifestSchema1, Digest: digest('e'), Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}},
			{MediaType: types.OCIManifestSchema1, Digest: digest('f'), Platform: &v1.Platform{OS: "linux", Architecture: "amd64", Features: []string{rafs.PlatformFeature}}},
		}}},
		blobs:    map[string][]byte{base.digest.String(): base.blob, app.digest.String(): app.blob},
		blobReqs: map[string]int{},
	}
	return sc
}

// newSiblingSnapshotter is newTestSnapshotter over reg.
func newSiblingSnapshotter(t *testing.T, reg Registry) *Snapshotter {
	t.Helper()
	return openSiblingSnapshotter(t, reg, filepath.Join(t.TempDir(), "r"))
}

// openSiblingSnapshotter is newSiblingSnapshotter at root.
func openSiblingSnapshotter(t *testing.T, reg Registry, root string) *Snapshotter {
	t.Helper()
	cfg := Default()
	cfg.Root = root
	cfg.MountTimeout = 10 * time.Second
	cfg.StopTimeout = 5 * time.Second
	cfg.Mount.StartOnPull = 0 // TestSiblingStartsOnPull sets its own
	s, err := New(t.Context(), cfg, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.daemons.command = func(st daemonState, mp, sock string) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "mount", st.Image, mp)
		cmd.Env = append(os.Environ(), fakeMountEnv+"=1", "DAMSELFLY_API_SOCKET="+sock)
		return cmd, nil
	}
	t.Cleanup(func() {
		for _, k := range []string{"ctr", "view"} {
			s.Remove(context.Background(), k)
		}
	})
	return s
}

// prepareLayer is containerd's unpacker's Prepare of layer i of the
// scene's original image, with CRI's labels and ref, on parent.
func (sc *siblingScene) prepareLayer(s *Snapshotter, ref string, i int, parent string) error {
	_, err := s.Prepare(context.Background(), fmt.Sprintf("extract-%d-%s", i, sc.chain[i]), parent, snapshots.WithLabels(map[string]string{
		snapshots.LabelSnapshotRef:             sc.chain[i],
		snapshotters.TargetRefLabel:            ref,
		snapshotters.TargetManifestDigestLabel: sc.orig,
		snapshotters.TargetLayerDigestLabel:    sc.layers[i].digest.String(),
	}))
	return err
}

// unpackSibling unpacks the scene's original image as containerd does
// and returns the top snapshot's name.
func (sc *siblingScene) unpackSibling(t *testing.T, s *Snapshotter) string {
	t.Helper()
	parent := ""
	for i := range sc.layers {
		if err := sc.prepareLayer(s, sc.ref, i, parent); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("prepare of layer %d: got %v, want ErrAlreadyExists (served by the RAFS sibling)", i, err)
		}
		info, err := s.Stat(t.Context(), sc.chain[i])
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		want := map[string]string{LabelLayer: layerSource, LabelManifest: sc.rafs, LabelImage: sc.repo, LabelSource: sc.repo + "@" + sc.orig}
		if i == len(sc.layers)-1 {
			want = map[string]string{LabelLayer: layerBootstrap, LabelManifest: sc.rafs, LabelImage: sc.repo, LabelSource: ""}
		}
		for k, v := range want {
			if info.Labels[k] != v {
				t.Errorf("layer %d: label %s is %q, want %q", i, k, info.Labels[k], v)
			}
		}
		if info.Kind != snapshots.KindCommitted || info.Parent != parent {
			t.Errorf("layer %d: got %s on %q, want committed on %q", i, info.Kind, info.Parent, parent)
		}
		parent = sc.chain[i]
	}
	return parent
}

// TestSiblingServesIndexImage: the original manifest of a convert
// --index image, pulled by the index's tag, is served by its RAFS
// sibling: no layer downloaded, the lower layers (one of them twice in
// the manifest) empty, the top one the sibling's bootstrap layer whose
// daemon the container mounts; the index is read once for the pull.
func TestSiblingServesIndexImage(t *testing.T) {
	sc := newSiblingScene(t)
	s := newSiblingSnapshotter(t, sc.reg)
	top := sc.unpackSibling(t, s)
	if n, blobs := sc.reg.counts(); n != 1 || len(blobs) != 0 {
		t.Errorf("the pull read the index %d times and blobs %v, want once and none", n, blobs)
	}
	m, err := s.Prepare(t.Context(), "ctr", top)
	if err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(s.root, "mounts", daemonID(sc.rafs), "mnt")
	if got := lowerOf(t, m); got != mp {
		t.Errorf("container lowerdir %s, want the RAFS sibling's mount %s", got, mp)
	}
	pids := s.Daemons()
	if pids[sc.rafs] == 0 || len(pids) != 1 {
		t.Fatalf("daemons %v, want one for the sibling %s", pids, sc.rafs)
	}
	// A restarted snapshotter adopts the sibling's daemon.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSiblingSnapshotter(t, sc.reg, s.root)
	if got := s.Daemons(); got[sc.rafs] != pids[sc.rafs] || len(got) != 1 {
		t.Fatalf("daemons %v after a restart, want the adopted %v", got, pids)
	}
	if m, err := s.Mounts(t.Context(), "ctr"); err != nil || lowerOf(t, m) != mp {
		t.Fatalf("mounts of the container after a restart: %+v, %v", m, err)
	}
	for _, c := range sc.chain[:2] {
		info, err := s.Stat(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		var id string
		s.ms.WithTransaction(t.Context(), false, func(ctx context.Context) error {
			chain, err := chainIn(ctx, info.Name)
			if err == nil {
				id = chain[0].id
			}
			return err
		})
		if entries, err := os.ReadDir(s.upperDir(id)); err != nil || len(entries) != 0 {
			t.Errorf("source layer %s holds %d entries (%v), want none", c, len(entries), err)
		}
	}
	if err := s.Remove(t.Context(), "ctr"); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v after the container went, want none", got)
	}
}

// TestSiblingStartsOnPull: the pull of an original image its RAFS
// sibling serves starts the sibling's daemon (Mount.StartOnPull), which
// the first container then uses.
func TestSiblingStartsOnPull(t *testing.T) {
	sc := newSiblingScene(t)
	s := newSiblingSnapshotter(t, sc.reg)
	s.startOnPull = time.Minute
	top := sc.unpackSibling(t, s)
	pid := waitDaemon(t, s, sc.rafs)
	if _, err := s.Prepare(t.Context(), "ctr", top); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 1 || got[sc.rafs] != pid {
		t.Fatalf("daemons %v after the first container, want the sibling's the pull started (%d)", got, pid)
	}
	if err := s.Remove(t.Context(), "ctr"); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v after the container went, want none", got)
	}
	waitGone(t, pid)
}

// TestSiblingFallback: whatever does not prove a RAFS sibling leaves
// the layer to containerd (an ordinary snapshot, no error).
func TestSiblingFallback(t *testing.T) {
	for _, tt := range []struct {
		name      string
		change    func(sc *siblingScene)
		ref       func(sc *siblingScene) string
		wantIndex int
	}{
		{name: "annotation names another source", change: func(sc *siblingScene) {
			sc.reg.manifests[sc.repo+"@"+sc.rafs].Annotations[rafs.AnnotationSource] = digest('9').String()
		}, wantIndex: 1},
		{name: "tag moved off the manifest", change: func(sc *siblingScene) {
			idx := sc.reg.indexes["docker://"+sc.ref]
			idx.Manifests[0].Digest = digest('7')
		}, wantIndex: 1},
		{name: "reference is not an index", ref: func(sc *siblingScene) string { return "reg.test/app:plain" }, wantIndex: 1},
		{name: "reference by the manifest's digest", ref: func(sc *siblingScene) string { return "reg.test/app@" + sc.orig }, wantIndex: 0},
		{name: "index read error", change: func(sc *siblingScene) { sc.reg.indexErr = errors.New("registry down") }, wantIndex: 1},
		{name: "sibling's manifest unreadable", change: func(sc *siblingScene) {
			delete(sc.reg.manifests, sc.repo+"@"+sc.rafs)
		}, wantIndex: 1},
		{name: "original's config unreadable", change: func(sc *siblingScene) {
			delete(sc.reg.configs, sc.repo+"@"+sc.orig)
		}, wantIndex: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := newSiblingScene(t)
			if tt.change != nil {
				tt.change(sc)
			}
			ref := sc.ref
			if tt.ref != nil {
				ref = tt.ref(sc)
			}
			s := newSiblingSnapshotter(t, sc.reg)
			// Every layer, as containerd does: the answer is the same for
			// each, and asked once.
			parent := ""
			for i := range sc.layers {
				key := fmt.Sprintf("extract-%d-%s", i, sc.chain[i])
				if err := sc.prepareLayer(s, ref, i, parent); err != nil {
					t.Fatalf("prepare of layer %d: got %v, want an ordinary snapshot", i, err)
				}
				if err := s.Commit(t.Context(), sc.chain[i], key); err != nil {
					t.Fatal(err)
				}
				info, err := s.Stat(t.Context(), sc.chain[i])
				if err != nil {
					t.Fatal(err)
				}
				if info.Labels[LabelLayer] != "" {
					t.Errorf("layer %d has %s=%q, want an ordinary layer", i, LabelLayer, info.Labels[LabelLayer])
				}
				parent = sc.chain[i]
			}
			if n, _ := sc.reg.counts(); n != tt.wantIndex {
				t.Errorf("index read %d times, want %d", n, tt.wantIndex)
			}
		})
	}
}

// TestSourceLayerHazard: the chain IDs of the original's lower layers
// are shared by every image with the same bottom layers, so containerd
// stacks such an image on the empty source snapshots the sibling pull
// left. The first snapshot made on such a chain fills them (each
// snapshot once, though both are of the same base layer) and so sees
// the base layer's files; the RAFS image's own chain still mounts only the
// sibling. A layer whose blob is not what its chain ID promises fails
// the snapshot and stays empty and marked, never silently reused.
func TestSourceLayerHazard(t *testing.T) {
	rafstest.RequireRoot(t)
	sc := newSiblingScene(t)
	s := newSiblingSnapshotter(t, sc.reg)
	top := sc.unpackSibling(t, s)
	ctx := t.Context()

	// A plain image of the base layer twice and one of its own: containerd
	// finds the first two chain IDs and prepares the third on them.
	m, err := s.Prepare(ctx, "extract-other", sc.chain[1])
	if err != nil {
		t.Fatalf("prepare on the shared base layers: %v", err)
	}
	lowers := strings.Split(lowerOf(t, m), ":")
	if len(lowers) != 2 {
		t.Fatalf("lowerdirs %v, want the two base layers", lowers)
	}
	for _, d := range lowers {
		if b, err := os.ReadFile(filepath.Join(d, sc.baseFile)); err != nil || string(b) != "base layer" {
			t.Errorf("%s in lower %s: %q, %v; want the base layer's file", sc.baseFile, d, b, err)
		}
	}
	for _, c := range sc.chain[:2] {
		if info, err := s.Stat(ctx, c); err != nil || info.Labels[LabelLayer] != layerSourceFilled {
			t.Errorf("source layer %s after its fill: %v, %v; want %s", c, info.Labels, err, layerSourceFilled)
		}
	}
	if _, blobs := sc.reg.counts(); blobs[sc.layers[0].digest.String()] != 2 || len(blobs) != 1 {
		t.Errorf("blob reads %v, want the base layer's twice (one per snapshot)", blobs)
	}
	// A view on the base layer alone: already filled, not read again.
	v, err := s.View(ctx, "view", sc.chain[0])
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(lowerOf(t, v), sc.baseFile)); err != nil || string(b) != "base layer" {
		t.Errorf("view of the base layer: %q, %v", b, err)
	}
	if _, blobs := sc.reg.counts(); blobs[sc.layers[0].digest.String()] != 2 {
		t.Errorf("blob reads %v after the view, want no more", blobs)
	}
	// The RAFS image's own chain is unchanged: only the sibling's mount.
	c, err := s.Prepare(ctx, "ctr", top)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lowerOf(t, c), filepath.Join(s.root, "mounts", daemonID(sc.rafs), "mnt"); got != want {
		t.Errorf("RAFS container lowerdir %s, want %s", got, want)
	}

	t.Run("interrupted fill", func(t *testing.T) {
		sc := newSiblingScene(t)
		s := newSiblingSnapshotter(t, sc.reg)
		sc.unpackSibling(t, s)
		chain, err := s.chain(ctx, sc.chain[0])
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(s.root, "snapshots", chain[0].id)
		if err := os.WriteFile(filepath.Join(s.upperDir(chain[0].id), sc.baseFile), []byte("base layer"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, "fill-left"), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := s.View(ctx, "view", sc.chain[0]); err != nil {
			t.Fatal(err)
		}
		if info, err := s.Stat(ctx, sc.chain[0]); err != nil || info.Labels[LabelLayer] != layerSourceFilled {
			t.Errorf("source layer: %v, %v; want %s", info.Labels, err, layerSourceFilled)
		}
		if _, blobs := sc.reg.counts(); len(blobs) != 0 {
			t.Errorf("blob reads %v, want none: the layer was in place", blobs)
		}
		if _, err := os.Stat(filepath.Join(dir, "fill-left")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the interrupted fill's directory is left: %v", err)
		}
	})

	t.Run("original unreadable", func(t *testing.T) {
		// The plain image being unpacked has the layer too: its copy
		// fills the snapshot when the original's repository is denied.
		sc := newSiblingScene(t)
		s := newSiblingSnapshotter(t, sc.reg)
		sc.unpackSibling(t, s)
		other := newFakeLayer(t, map[string]string{"other.txt": "other"})
		plain := "docker://reg.test/other@" + digest('d').String()
		sc.reg.manifests[plain] = &v1.Manifest{SchemaVersion: 2, Layers: []v1.Descriptor{
			{MediaType: types.OCILayer, Digest: sc.layers[0].digest}, {MediaType: types.OCILayer, Digest: other.digest}}}
		sc.reg.configs[plain] = &v1.ConfigFile{RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{sc.layers[0].diffID, other.diffID}}}
		sc.reg.denied = map[string]bool{sc.repo + "@" + sc.orig: true}
		chain := chainIDs(sc.reg.configs[plain])
		_, err := s.Prepare(ctx, "extract-other", chain[0], snapshots.WithLabels(map[string]string{
			snapshots.LabelSnapshotRef:             chain[1],
			snapshotters.TargetRefLabel:            "reg.test/other:v1",
			snapshotters.TargetManifestDigestLabel: digest('d').String(),
			snapshotters.TargetLayerDigestLabel:    other.digest.String(),
		}))
		if err != nil {
			t.Fatalf("prepare of the plain image's layer on the shared base: %v", err)
		}
		if info, err := s.Stat(ctx, sc.chain[0]); err != nil || info.Labels[LabelLayer] != layerSourceFilled {
			t.Errorf("source layer: %v, %v; want %s", info.Labels, err, layerSourceFilled)
		}
		// Without that image, the fill fails and says why.
		if _, err := s.View(ctx, "view", sc.chain[1]); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("view on a source layer no repository gives: got %v, want the blob's error", err)
		}
	})

	t.Run("blob does not match the chain ID", func(t *testing.T) {
		sc := newSiblingScene(t)
		bad := newFakeLayer(t, map[string]string{"base.txt": "not the base layer"})
		sc.reg.blobs[sc.layers[0].digest.String()] = bad.blob
		s := newSiblingSnapshotter(t, sc.reg)
		sc.unpackSibling(t, s)
		_, err := s.View(ctx, "view", sc.chain[0])
		if err == nil || !strings.Contains(err.Error(), sc.layers[0].diffID.String()) {
			t.Fatalf("view on a source layer whose blob is wrong: got %v, want an error naming diff ID %s", err, sc.layers[0].diffID)
		}
		info, err := s.Stat(ctx, sc.chain[0])
		if err != nil || info.Labels[LabelLayer] != layerSource {
			t.Errorf("source layer after a failed fill: %v, %v; want still %s", info.Labels, err, layerSource)
		}
		if _, err := s.Stat(ctx, "view"); !errdefs.IsNotFound(err) {
			t.Errorf("the view is left after its fill failed: %v", err)
		}
	})
}

// TestSiblingBootstrapFails: a sibling whose bootstrap does not check
// out leaves the top layer to containerd, and the empty source layers
// below it are filled before the top layer's snapshot is made on them:
// the pull ends as a full one would, never on empty layers.
func TestSiblingBootstrapFails(t *testing.T) {
	rafstest.RequireRoot(t)
	sc := newSiblingScene(t)
	sc.reg.bootErr = errors.New("bootstrap: magic number mismatch")
	s := newSiblingSnapshotter(t, sc.reg)
	ctx := t.Context()
	for i := range sc.layers[:2] {
		parent := ""
		if i > 0 {
			parent = sc.chain[i-1]
		}
		if err := sc.prepareLayer(s, sc.ref, i, parent); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("prepare of lower layer %d: got %v, want ErrAlreadyExists", i, err)
		}
	}
	top := len(sc.layers) - 1
	if err := sc.prepareLayer(s, sc.ref, top, sc.chain[top-1]); err != nil {
		t.Fatalf("prepare of the top layer with a bad sibling bootstrap: got %v, want an ordinary snapshot", err)
	}
	for _, c := range sc.chain[:top] {
		if info, err := s.Stat(ctx, c); err != nil || info.Labels[LabelLayer] != layerSourceFilled {
			t.Errorf("source layer %s under an ordinary top layer: %v, %v; want %s", c, info.Labels, err, layerSourceFilled)
		}
	}
	key := fmt.Sprintf("extract-%d-%s", top, sc.chain[top])
	m, err := s.Mounts(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lowers := strings.Split(lowerOf(t, m), ":")
	for _, d := range lowers {
		if b, err := os.ReadFile(filepath.Join(d, sc.baseFile)); err != nil || string(b) != "base layer" {
			t.Errorf("%s in lower %s: %q, %v; want the base layer's file", sc.baseFile, d, b, err)
		}
	}
	if err := s.Commit(ctx, sc.chain[top], key); err != nil {
		t.Fatal(err)
	}
	if got := s.Daemons(); len(got) != 0 {
		t.Errorf("daemons %v, want none: the image is not served by its sibling", got)
	}
}

// TestSiblingOnRealBase: the base layer's chain ID already names a full
// snapshot (an earlier plain pull with that base), so containerd starts
// the sibling pull above it. The layers above become source and
// bootstrap layers on the real one, the container mounts only the
// sibling, and the real base layer is left as it is.
func TestSiblingOnRealBase(t *testing.T) {
	sc := newSiblingScene(t)
	s := newSiblingSnapshotter(t, sc.reg)
	ctx := t.Context()
	// The earlier plain pull: an ordinary snapshot with the base's file.
	m, err := s.Prepare(ctx, "extract-base", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m[0].Source, sc.baseFile), []byte("base layer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, sc.chain[0], "extract-base", snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotRef: sc.chain[0]})); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(sc.layers); i++ {
		if err := sc.prepareLayer(s, sc.ref, i, sc.chain[i-1]); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("prepare of layer %d above a real base: got %v, want ErrAlreadyExists", i, err)
		}
	}
	top, err := s.Stat(ctx, sc.chain[len(sc.chain)-1])
	if err != nil || top.Labels[LabelLayer] != layerBootstrap || top.Labels[LabelManifest] != sc.rafs {
		t.Fatalf("top snapshot %+v, %v; want the sibling's bootstrap layer", top, err)
	}
	c, err := s.Prepare(ctx, "ctr", top.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lowerOf(t, c), filepath.Join(s.root, "mounts", daemonID(sc.rafs), "mnt"); got != want {
		t.Errorf("container lowerdir %s, want only the sibling's mount %s", got, want)
	}
	if base, err := s.Stat(ctx, sc.chain[0]); err != nil || base.Labels[LabelLayer] != "" {
		t.Errorf("the real base layer: %+v, %v; want it untouched", base, err)
	}
	if _, blobs := sc.reg.counts(); len(blobs) != 0 {
		t.Errorf("blob reads %v, want none", blobs)
	}
}
