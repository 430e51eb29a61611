package snapshotter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"golang.org/x/sys/unix"
)

// Filling source layers.
//
// The snapshots of an original image's lower layers that its RAFS
// sibling serves are committed empty (layerSource): the image's RAFS
// mount holds their files. Their names are containerd's chain IDs,
// which any image with the same bottom layers shares, so containerd
// will stack another image's layers on them, or run a container on one
// directly. Such a chain does not stand on the RAFS image, and would
// miss the layer's files. So before any snapshot is made on a chain
// that needs an empty source layer's files, the layer is filled: its
// blob read from the original image's repository (digest-checked),
// applied as containerd's overlayfs applier would, its diff ID checked
// against the one the chain ID stands for, and the directory swapped in
// whole. No mount ever has an empty source layer's directory in it:
// on a RAFS image's own chain they are below the RAFS mount, left out.

// fillSources fills the empty source layers among chain (nearest
// first, all committed) that a snapshot on chain would mount: those
// above its first bootstrap snapshot, or all without one. alt, if not
// empty, is the image (docker://HOST/REPO@DIGEST) being unpacked on
// chain, tried for a layer its original image cannot give.
func (s *Snapshotter) fillSources(ctx context.Context, chain []link, alt string) error {
	upto := len(chain)
	if _, _, at, ok := rafsImage(chain); ok {
		upto = at
	}
	// Bottom up: a layer is applied over its parents, filled first.
	for i := upto - 1; i >= 0; i-- {
		if chain[i].labels[LabelLayer] != layerSource {
			continue
		}
		parents := make([]string, 0, len(chain)-i-1)
		for _, p := range chain[i+1:] {
			parents = append(parents, s.upperDir(p.id))
		}
		if err := s.fill(ctx, chain[i], parents, alt); err != nil {
			return err
		}
	}
	return nil
}

// fill fills one empty source layer, unless another fill did meanwhile.
// s.fillMu serialises fills: they are rare, and one at a time keeps two
// of the same layer from racing.
func (s *Snapshotter) fill(ctx context.Context, l link, parents []string, alt string) error {
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	info, err := s.Snapshotter.Stat(ctx, l.name)
	if err != nil {
		return err
	}
	if info.Labels[LabelLayer] != layerSource {
		return nil
	}
	image := info.Labels[LabelSource]
	dir := filepath.Join(s.root, "snapshots", l.id)
	// What an interrupted fill left: a temporary directory, or a layer
	// swapped in whole but not yet marked (only the rename fills it).
	if old, err := filepath.Glob(filepath.Join(dir, "fill-*")); err == nil {
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	if entries, err := os.ReadDir(s.upperDir(l.id)); err == nil && len(entries) > 0 {
		return s.markFilled(ctx, info)
	}
	// The original image first; then the image being unpacked, whose
	// own copy of the layer containerd would have applied had the chain
	// ID not been taken (its repository may be readable when the
	// original's no longer is).
	sources := []string{image}
	if alt != "" && alt != image {
		sources = append(sources, alt)
	}
	var errs []error
	for _, src := range sources {
		err := s.fillFrom(ctx, l, info, src, dir, parents)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// fillFrom fills the source layer l (info) from the layer of image whose
// chain ID l has. s.fillMu held.
func (s *Snapshotter) fillFrom(ctx context.Context, l link, info snapshots.Info, image, dir string, parents []string) error {
	target := info.Labels[snapshots.LabelSnapshotRef]
	start := time.Now()
	layer, diffID, err := s.sourceLayer(ctx, image, target)
	if err != nil {
		return fmt.Errorf("fill layer %s from %s: %w", target, image, err)
	}
	s.log.Info("filling a source layer that a chain without its RAFS image needs", "image", image, "layer", layer, "snapshot", l.name)
	rc, err := s.reg.Blob(ctx, image, layer)
	if err != nil {
		return fmt.Errorf("fill layer %s of %s: %w", layer, image, err)
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(dir, "fill-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := applyLayer(ctx, tmp, rc, diffID, parents); err != nil {
		return fmt.Errorf("fill layer %s of %s: %w", layer, image, err)
	}
	// The empty fs directory is replaced whole: rename(2) onto an empty
	// directory is atomic (os.Rename refuses an existing directory).
	if err := unix.Rename(tmp, s.upperDir(l.id)); err != nil {
		return fmt.Errorf("fill layer %s of %s: %w", layer, image, err)
	}
	if err := s.markFilled(ctx, info); err != nil {
		return err
	}
	s.log.Info("source layer filled", "image", image, "layer", layer, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// markFilled labels the source layer info as filled.
func (s *Snapshotter) markFilled(ctx context.Context, info snapshots.Info) error {
	info.Labels[LabelLayer] = layerSourceFilled
	if _, err := s.Snapshotter.Update(ctx, info, "labels."+LabelLayer); err != nil {
		return fmt.Errorf("mark source layer %s filled: %w", info.Name, err)
	}
	return nil
}

// sourceLayer finds the layer of image (an original manifest) whose
// chain ID is target, by the config's diff IDs: the layer digest alone
// is not enough, as a manifest may hold one layer twice.
func (s *Snapshotter) sourceLayer(ctx context.Context, image, target string) (layer, diffID string, err error) {
	m, err := s.reg.Manifest(ctx, image)
	if err != nil {
		return "", "", err
	}
	cf, err := s.reg.Config(ctx, image)
	if err != nil {
		return "", "", err
	}
	chain := chainIDs(cf)
	i := slices.Index(chain, target)
	if i < 0 || i >= len(m.Layers) {
		return "", "", fmt.Errorf("no layer of the manifest has chain ID %s", target)
	}
	return m.Layers[i].Digest.String(), cf.RootFS.DiffIDs[i].String(), nil
}

// applyLayer applies the compressed layer blob r (gzip, zstd or plain
// tar) to dir with overlayfs whiteouts, as containerd's applier does to
// an overlayfs snapshot, over parents (nearest first), and checks that
// the tar's digest is diffID.
func applyLayer(ctx context.Context, dir string, r io.Reader, diffID string, parents []string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	ds, err := compression.DecompressStream(r)
	if err != nil {
		return err
	}
	defer ds.Close()
	h := sha256.New()
	tr := io.TeeReader(ds, h)
	opts := []archive.ApplyOpt{archive.WithConvertWhiteout(archive.OverlayConvertWhiteout)}
	if len(parents) > 0 {
		opts = append(opts, archive.WithParents(parents))
	}
	if _, err := archive.Apply(ctx, dir, tr, opts...); err != nil {
		return err
	}
	// The tar's end-of-archive padding counts to its digest; the rest
	// of the blob, to the end, is where its own digest is checked.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return fmt.Errorf("layer's tar is %s, want diff ID %s", got, diffID)
	}
	return nil
}
