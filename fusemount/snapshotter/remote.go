package snapshotter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
)

// Remote snapshots: the content-less snapshots committed for the layers
// of a RAFS image, and for those of an original image its RAFS sibling
// serves, each answered to containerd with ErrAlreadyExists.

// commitRemote commits the snapshot of a RAFS layer without its content
// and returns the ErrAlreadyExists containerd takes as "done".
func (s *Snapshotter) commitRemote(ctx context.Context, key, parent string, r remoteLayer, kind string, labels map[string]string) error {
	if kind == layerBootstrap {
		if name, err := s.committed(ctx, r.target, parent); err != nil || name != "" {
			if err == nil {
				s.startPulled(r.manifest, r.repo)
			}
			return existsOr(r, err)
		}
		start := time.Now()
		if err := s.reg.CheckBootstrap(ctx, r.image()); err != nil {
			// err names the image.
			return fmt.Errorf("RAFS bootstrap layer %s: %w", r.layer, err)
		}
		s.log.Info("RAFS image checked", "image", r.image(), "bootstrap", r.layer, "took", time.Since(start).Round(time.Millisecond))
	}
	labels = withLabels(labels, map[string]string{LabelLayer: kind, LabelManifest: r.manifest, LabelImage: r.repo})
	err := s.commitEmpty(ctx, key, parent, r, labels)
	if kind == layerBootstrap && errdefs.IsAlreadyExists(err) {
		s.startPulled(r.manifest, r.repo)
	}
	return err
}

// commitSibling commits the snapshot of a layer of an original image
// that its RAFS sibling serves: the top layer as the sibling's bootstrap
// layer (checked as a RAFS pull checks it), a lower one as an empty
// source layer (fill.go). done is false when the layer is left to
// containerd after all: its chain ID is not the original's (the unpack
// is not of that manifest), or the bootstrap does not check out (the
// source layers below, if any, are filled when the layer's snapshot is
// made on them).
func (s *Snapshotter) commitSibling(ctx context.Context, key, parent string, r remoteLayer, sib *sibling, labels map[string]string) (done bool, err error) {
	i := slices.Index(sib.chain, r.target)
	if i < 0 {
		s.log.Warn("a layer's chain ID is not one of its manifest's; containerd pulls it in full", "image", r.ref, "manifest", r.manifest, "layer", r.layer, "chain", r.target)
		return false, nil
	}
	rafsImage := r.repo + "@" + sib.manifest
	more := map[string]string{LabelLayer: layerSource, LabelManifest: sib.manifest, LabelImage: r.repo, LabelSource: r.image()}
	if i == len(sib.chain)-1 {
		if name, err := s.committed(ctx, r.target, parent); err != nil || name != "" {
			if err == nil {
				s.startPulled(sib.manifest, r.repo)
			}
			return true, existsOr(r, err)
		}
		start := time.Now()
		if err := s.reg.CheckBootstrap(ctx, rafsImage); err != nil {
			s.log.Warn("the RAFS image beside the one pulled does not check out; containerd pulls the top layer in full", "image", r.ref, "rafs", rafsImage, "err", err)
			return false, nil
		}
		s.log.Info("RAFS image checked", "image", rafsImage, "for", r.image(), "took", time.Since(start).Round(time.Millisecond))
		more = map[string]string{LabelLayer: layerBootstrap, LabelManifest: sib.manifest, LabelImage: r.repo}
	}
	err = s.commitEmpty(ctx, key, parent, r, withLabels(labels, more))
	if more[LabelLayer] == layerBootstrap && errdefs.IsAlreadyExists(err) {
		s.startPulled(sib.manifest, r.repo)
	}
	return true, err
}

// existsOr is the ErrAlreadyExists containerd takes as "done" for r's
// snapshot, or err if there is one.
func existsOr(r remoteLayer, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("remote snapshot %s: %w", r.target, errdefs.ErrAlreadyExists)
}

// committed returns the name of the committed snapshot for chain ID
// target on parent, "" if there is none. containerd finds a remote
// snapshot by its labels (snapshots.LabelSnapshotRef) and parent, not
// its name.
func (s *Snapshotter) committed(ctx context.Context, target, parent string) (string, error) {
	var name string
	err := s.Snapshotter.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if name == "" && info.Kind == snapshots.KindCommitted && info.Parent == parent && info.Labels[snapshots.LabelSnapshotRef] == target {
			name = info.Name
		}
		return nil
	}, fmt.Sprintf(`labels.%q==%s`, snapshots.LabelSnapshotRef, target))
	if err != nil && !errdefs.IsNotFound(err) {
		return "", err
	}
	return name, nil
}

// commitEmpty commits r's snapshot, content-less, with labels, and
// returns the ErrAlreadyExists containerd takes as "done". Its name is
// the chain ID, unless a snapshot of that name stands on another
// parent (the chain's lower layers were made in another containerd
// namespace); then the chain ID with its parent's digest.
func (s *Snapshotter) commitEmpty(ctx context.Context, key, parent string, r remoteLayer, labels map[string]string) error {
	exists := existsOr(r, nil)
	found, err := s.committed(ctx, r.target, parent)
	if err != nil || found != "" {
		return existsOr(r, err)
	}
	name := r.target
	if _, err := s.Snapshotter.Stat(ctx, name); err == nil {
		sum := sha256.Sum256([]byte(parent))
		name = r.target + "-on-" + hex.EncodeToString(sum[:8])
	}
	if _, err := s.Snapshotter.Prepare(ctx, key, parent, snapshots.WithLabels(labels)); err != nil {
		return err
	}
	if err := s.Snapshotter.Commit(ctx, name, key, snapshots.WithLabels(labels)); err != nil {
		if rerr := s.Snapshotter.Remove(ctx, key); rerr != nil {
			s.log.Warn("remove the snapshot of a failed commit", "key", key, "err", rerr)
		}
		if errdefs.IsAlreadyExists(err) {
			return exists
		}
		return err
	}
	return exists
}

// startPulled starts the mount daemon of the image whose bootstrap layer
// (manifest in repo, docker://HOST/REPO) a pull has just committed (StartOnPull), in the background: the pull
// does not wait for it, and the first container finds the mount ready.
// Until a container uses it, the daemon is kept StartOnPull after the
// pull, then stopped by the periodic check. A failed start only costs
// the first container the start it would have made anyway.
func (s *Snapshotter) startPulled(manifest, repo string) {
	keep := s.startOnPull
	if keep <= 0 || !s.daemons.keepUntil(manifest, repo+"@"+manifest, time.Now().Add(keep)) {
		return
	}
	image := repo + "@" + manifest
	s.bg.Go(func() {
		start := time.Now()
		if _, err := s.daemons.ensure(s.bgCtx, manifest, image); err != nil {
			if s.bgCtx.Err() == nil {
				s.log.Warn("mount daemon of a pulled image did not start; the first container starts it", "image", image, "err", err)
			}
			return
		}
		s.log.Info("mount daemon started for a pulled image", "image", image, "took", time.Since(start).Round(time.Millisecond), "kept_for", keep)
	})
}
