package snapshotter

import (
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/snapshotters"
	"github.com/google/go-containerregistry/pkg/name"

	"damselfly/rafs/registry"
)

// Labels the snapshotter sets on the snapshots it commits for RAFS
// layers. They are snapshot labels (the containerd.io/snapshot/ prefix),
// so containerd keeps them on its own record of the snapshot too.
const (
	// LabelLayer is "blob" or "bootstrap": the kind of RAFS layer the
	// snapshot stands for.
	LabelLayer = "containerd.io/snapshot/damselfly.rafs.layer"
	// LabelManifest is the digest of the RAFS manifest the layer is in.
	LabelManifest = "containerd.io/snapshot/damselfly.rafs.manifest"
	// LabelImage is the image's repository reference, as `damselfly
	// mount` takes it with the manifest digest (docker://HOST/REPO).
	LabelImage = "containerd.io/snapshot/damselfly.rafs.image"
	// LabelSource is on the snapshots of the lower layers of an original
	// image served by its RAFS sibling (sibling.go): the original
	// manifest (docker://HOST/REPO@DIGEST), whose layer fills the
	// snapshot when a chain without the RAFS image needs it (fill.go).
	LabelSource = "containerd.io/snapshot/damselfly.rafs.source"
)

// Values of LabelLayer.
const (
	layerBlob      = "blob"
	layerBootstrap = "bootstrap"
	// layerSource is a lower layer of an original image whose RAFS
	// sibling serves it: empty, its content in the sibling's bootstrap
	// and blobs, until fill.go fills it.
	layerSource = "source"
	// layerSourceFilled is a layerSource snapshot that holds its layer.
	layerSourceFilled = "source-filled"
)

// remoteLayer is what the remote-snapshot labels of one Prepare name.
type remoteLayer struct {
	target   string // the snapshot containerd wants (the layer's chain ID)
	ref      string // the reference the client pulled: HOST/REPO[:TAG][@DIGEST]
	repo     string // docker://HOST/REPO
	manifest string // sha256:...
	layer    string // sha256:...
}

// image is the reference of the layer's manifest, as transport parses it.
func (r remoteLayer) image() string { return r.repo + "@" + r.manifest }

// parseRemote reads the remote-snapshot labels. ok is false when the
// Prepare is not for a remote snapshot (no target, or no image
// reference: the caller did not ask for lazy pulling); an error means
// labels that claim to be remote-snapshot labels but do not parse.
func parseRemote(labels map[string]string) (r remoteLayer, ok bool, err error) {
	r.target = labels[snapshots.LabelSnapshotRef]
	ref := labels[snapshotters.TargetRefLabel]
	if r.target == "" || ref == "" {
		return remoteLayer{}, false, nil
	}
	r.manifest = labels[snapshotters.TargetManifestDigestLabel]
	r.layer = labels[snapshotters.TargetLayerDigestLabel]
	if !registry.ValidDigest(r.manifest) {
		return remoteLayer{}, false, fmt.Errorf("label %s: %q is not a digest", snapshotters.TargetManifestDigestLabel, r.manifest)
	}
	if !registry.ValidDigest(r.layer) {
		return remoteLayer{}, false, fmt.Errorf("label %s: %q is not a digest", snapshotters.TargetLayerDigestLabel, r.layer)
	}
	// CRI passes a normalized reference (docker.io/library/app:tag or
	// HOST/REPO@sha256:...); only its repository is used: the manifest
	// is read by the digest containerd resolved, never by tag again.
	n, err := name.ParseReference(strings.TrimPrefix(ref, "docker://"))
	if err != nil {
		return remoteLayer{}, false, fmt.Errorf("label %s: %w", snapshotters.TargetRefLabel, err)
	}
	r.repo = "docker://" + n.Context().Name()
	r.ref = n.Name()
	return r, true, nil
}

// withLabels returns labels with more added, as a new map.
func withLabels(labels map[string]string, more map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+len(more))
	for k, v := range labels {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}
