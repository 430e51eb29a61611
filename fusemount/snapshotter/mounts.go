package snapshotter

import (
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
)

// link is one snapshot of a parent chain: its storage ID and labels.
type link struct {
	id     string
	labels map[string]string
	name   string
}

// rafsImage returns the RAFS image a parent chain (nearest parent first)
// stands on: the manifest and image labels of the first bootstrap
// snapshot in it, and its index; ok is false when there is none.
func rafsImage(chain []link) (manifest, image string, at int, ok bool) {
	for i, l := range chain {
		if l.labels[LabelLayer] == layerBootstrap {
			return l.labels[LabelManifest], l.labels[LabelImage], i, true
		}
	}
	return "", "", 0, false
}

// lowerDirs are the overlay lower directories of a snapshot whose parent
// chain (nearest first) stands on a RAFS image at index at: the parents
// above the bootstrap snapshot (ordinary layers committed on top of the
// image, such as a committed container), then the image's mount. The
// snapshots of the RAFS blobs below it are empty and left out.
func lowerDirs(chain []link, at int, upper func(id string) string, rafsMount string) []string {
	dirs := make([]string, 0, at+1)
	for _, l := range chain[:at] {
		dirs = append(dirs, upper(l.id))
	}
	return append(dirs, rafsMount)
}

// overlayMounts is what containerd mounts for a snapshot of kind over
// lowers: an overlay with the snapshot's upper and work directories for
// an active one; for a view, a read-only bind of a single lower, or an
// overlay of several (which is read-only without an upper). options are
// the overlay options the kernel needs here (index=off, userxattr).
func overlayMounts(kind snapshots.Kind, upper, work string, lowers, options []string) ([]mount.Mount, error) {
	if len(lowers) == 0 {
		return nil, fmt.Errorf("no lower directory")
	}
	for _, d := range lowers {
		// Overlay option syntax: ':' separates lower directories and ','
		// options; a path with either cannot be said.
		if strings.ContainsAny(d, ":,") {
			return nil, fmt.Errorf("lower directory %q has ':' or ','", d)
		}
	}
	switch kind {
	case snapshots.KindActive:
		opts := []string{"workdir=" + work, "upperdir=" + upper, "lowerdir=" + strings.Join(lowers, ":")}
		return []mount.Mount{{Type: "overlay", Source: "overlay", Options: append(opts, options...)}}, nil
	case snapshots.KindView:
		if len(lowers) == 1 {
			return []mount.Mount{{Type: "bind", Source: lowers[0], Options: []string{"ro", "rbind"}}}, nil
		}
		opts := []string{"lowerdir=" + strings.Join(lowers, ":")}
		return []mount.Mount{{Type: "overlay", Source: "overlay", Options: append(opts, options...)}}, nil
	}
	return nil, fmt.Errorf("a %s snapshot has no mounts", kind)
}
