package snapshotter

import (
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/snapshotters"
)

func TestParseRemote(t *testing.T) {
	t.Parallel()
	const (
		m = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		l = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	full := func(ref string) map[string]string {
		return map[string]string{
			snapshots.LabelSnapshotRef:             "sha256:chain",
			snapshotters.TargetRefLabel:            ref,
			snapshotters.TargetManifestDigestLabel: m,
			snapshotters.TargetLayerDigestLabel:    l,
		}
	}
	without := func(k string) map[string]string {
		x := full("127.0.0.1:5000/team/app:v1")
		delete(x, k)
		return x
	}
	with := func(k, v string) map[string]string {
		x := full("127.0.0.1:5000/team/app:v1")
		x[k] = v
		return x
	}
	for _, tt := range []struct {
		name    string
		labels  map[string]string
		ok      bool
		repo    string
		wantErr string
	}{
		{name: "tag", labels: full("127.0.0.1:5000/team/app:v1"), ok: true, repo: "docker://127.0.0.1:5000/team/app"},
		{name: "digest", labels: full("registry.example.com/app@" + m), ok: true, repo: "docker://registry.example.com/app"},
		{name: "docker hub", labels: full("docker.io/library/nginx:latest"), ok: true, repo: "docker://index.docker.io/library/nginx"},
		{name: "transport prefix", labels: full("docker://127.0.0.1:5000/app:v1"), ok: true, repo: "docker://127.0.0.1:5000/app"},
		{name: "no labels", labels: nil},
		{name: "no target", labels: without(snapshots.LabelSnapshotRef)},
		{name: "no image ref: not asked for lazy pulling", labels: without(snapshotters.TargetRefLabel)},
		{name: "no manifest digest", labels: without(snapshotters.TargetManifestDigestLabel), wantErr: "cri.manifest-digest"},
		{name: "bad layer digest", labels: with(snapshotters.TargetLayerDigestLabel, "sha256:zz"), wantErr: "cri.layer-digest"},
		{name: "bad reference", labels: with(snapshotters.TargetRefLabel, "UPPER/Case:v1"), wantErr: "cri.image-ref"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, ok, err := parseRemote(tt.labels)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.ok {
				t.Fatalf("got remote %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if r.repo != tt.repo || r.manifest != m || r.layer != l || r.target != "sha256:chain" {
				t.Errorf("got %+v, want repo %s, manifest %s, layer %s", r, tt.repo, m, l)
			}
			if want := tt.repo + "@" + m; r.image() != want {
				t.Errorf("got image %s, want %s", r.image(), want)
			}
		})
	}
}

// FuzzParseRemote: labels come from image annotations and clients;
// parseRemote never panics, and what it accepts is well-formed.
func FuzzParseRemote(f *testing.F) {
	f.Add("sha256:chain", "127.0.0.1:5000/team/app:v1", "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64))
	f.Add("t", "docker.io/library/nginx@sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("1", 64), "sha256:zz")
	f.Add("t", "docker://UPPER:v1", "", "")
	f.Fuzz(func(t *testing.T, target, ref, manifest, layer string) {
		r, ok, err := parseRemote(map[string]string{
			snapshots.LabelSnapshotRef:             target,
			snapshotters.TargetRefLabel:            ref,
			snapshotters.TargetManifestDigestLabel: manifest,
			snapshotters.TargetLayerDigestLabel:    layer,
		})
		if err != nil || !ok {
			return
		}
		if r.manifest != manifest || r.layer != layer || !strings.HasPrefix(r.repo, "docker://") || strings.ContainsAny(r.repo, "@ ") {
			t.Fatalf("accepted %+v from %q %q %q", r, ref, manifest, layer)
		}
	})
}
