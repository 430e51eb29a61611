package daemon

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the peer daemon keeps on disk is its user's alone, whatever the
// umask: a state directory found 0755 is made 0700 (and logged), and
// after a pull every directory under it, the node cache's included, is
// 0700 and every file 0600: identity and grant keys, holdings, chunks.
// Not parallel: the umask is the process's, restored before any parallel
// test resumes.
func TestStateAndCacheModes(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })

	img, blob := buildBlob(t)
	reg := newRegistry(t, blob)
	cfg := testConfig(t, clusterKey(t), "") // the cache in Dir/cache
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	d, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	rctx, rcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer rcancel()
	if err := readThrough(rctx, d, reg.srv.URL, img); err != nil {
		t.Fatal(err)
	}
	cancel() // Run writes the holdings as it stops
	if err := <-done; err != nil {
		t.Fatalf("daemon Run: %v", err)
	}
	if !strings.Contains(logs.String(), "made it 0700") {
		t.Errorf("the log does not say the state directory was tightened:\n%s", logs.String())
	}
	var entries, holdings int
	err = filepath.WalkDir(cfg.Dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		switch {
		case fi.IsDir():
			want = 0o700
		case fi.Mode().Type() == fs.ModeSocket:
			return nil
		case strings.Contains(p, "/cache/packs/"):
			entries++
		case strings.Contains(p, "/holdings/"):
			holdings++
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: got mode %v, want %v", p, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if entries == 0 || holdings == 0 {
		t.Errorf("got %d cache packs and %d holdings files; want the pull's", entries, holdings)
	}
}
