package rafstest

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"
)

// requireUmoci skips unless umoci is installed and the test runs as root,
// which umoci needs to restore owners, devices and trusted.* xattrs.
func requireUmoci(t *testing.T) {
	t.Helper()
	RequireTool(t, "umoci")
	RequireRoot(t)
}

// unpackAll writes imgs to an OCI layout under a temporary directory and
// unpacks each with umoci into a bundle named suffix+image name. It returns
// each image's rootfs by name.
func unpackAll(t *testing.T, dir string, imgs []Image, suffix string) map[string]string {
	t.Helper()
	layoutDir := filepath.Join(dir, "layout")
	if _, err := os.Stat(layoutDir); errors.Is(err, os.ErrNotExist) {
		if err := WriteOCILayout(t.Context(), layoutDir, imgs...); err != nil {
			t.Fatalf("WriteOCILayout: %v", err)
		}
	}
	var mu sync.Mutex
	roots := map[string]string{}
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(4)
	for _, img := range imgs {
		g.Go(func() error {
			root, err := UmociUnpack(ctx, layoutDir, img.Name, filepath.Join(dir, img.Name+suffix))
			if err != nil {
				return err
			}
			mu.Lock()
			roots[img.Name] = root
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return roots
}

// cleanName turns a tar entry name into the slash-separated path relative to
// the root: "./a/b/" becomes "a/b", "./" becomes "." (as sample's
// ImplicitDirs does).
func cleanName(name string) string {
	return path.Clean(strings.TrimPrefix(name, "./"))
}
