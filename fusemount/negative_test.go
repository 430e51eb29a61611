package fusemount

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// countingFS counts the LOOKUPs that reach the daemon.
type countingFS struct {
	*rafsFS
	lookups atomic.Int64
}

func (c *countingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	c.lookups.Add(1)
	return c.rafsFS.Lookup(cancel, h, name, out)
}

// TestNegativeLookupsAreCached: a name that does not exist is looked up
// once; the kernel answers ENOENT from its cache after that (every stat,
// open and exec of a missing name was a round trip to the daemon), and
// names that exist are still found.
func TestNegativeLookupsAreCached(t *testing.T) {
	requireFUSE(t)
	img := buildPlanImage(t)
	fsys := &countingFS{rafsFS: newRafsFS(img.boot, nil, "negative", time.Hour, slog.New(slog.DiscardHandler))}
	mp := t.TempDir()
	srv, err := fuse.NewServer(fsys, mp, &fuse.MountOptions{DirectMount: true, Name: "damselfly-test"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	missing := filepath.Join(mp, "no-such-file.so")
	for i := range 5 {
		if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat %d of a missing name: %v, want ENOENT", i, err)
		}
		if _, err := os.Open(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("open %d of a missing name: %v, want ENOENT", i, err)
		}
	}
	if n := fsys.lookups.Load(); n != 1 {
		t.Errorf("%d LOOKUPs reached the daemon for 10 stats and opens of one missing name, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(mp, "tiny")); err != nil {
		t.Errorf("stat of an existing name after the negative ones: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mp, "tiny", "below")); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("stat below a regular file: %v, want ENOTDIR", err)
	}
}
