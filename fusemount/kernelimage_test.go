package fusemount

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/rafs"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

const (
	fuseMagic  = 0x65735546
	erofsMagic = 0xE0F5E1E2
)

func requireEROFS(t *testing.T) {
	t.Helper()
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil || !bytes.Contains(fss, []byte("\terofs\n")) {
		rafstest.SkipOrFail(t, "the kernel's EROFS is required (not in /proc/filesystems)")
	}
}

func fsType(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type
}

// TestKernelImageLifecycle: the first mount of an image is served
// through FUSE and, once reads have put every chunk on the node, writes
// the image's kernel image; the next mount is the kernel's EROFS mount of
// it, with the same tree; unmounting it by hand ends its daemon; a
// kernel image changed on disk is not used but written again.
func TestKernelImageLifecycle(t *testing.T) {
	requireFUSE(t)
	requireEROFS(t)
	old := kernelImageCheckEvery
	kernelImageCheckEvery = 20 * time.Millisecond
	t.Cleanup(func() { kernelImageCheckEvery = old })

	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":meta-rafs"
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	want := filepath.Join(t.TempDir(), "unpacked")
	if err := rafs.Unpack(t.Context(), img.Bootstrap(), img.ChunkSource(), want, rafs.UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	sameTree := func(mp, what string) {
		t.Helper()
		if diff := rafstest.CompareTrees(want, mp); len(diff) > 0 {
			t.Fatalf("%s differs from the unpacked image (want=unpacked, got=mount):\n%s", what, strings.Join(diff, "\n"))
		}
	}
	cfg := testConfig(t)
	cfg.Prefetch.Enable = false
	cfg.KernelImage.Enable = true
	dir := cfg.kernelImagesDir()

	// 1. Nothing on the node: FUSE, and the kernel image once whole.
	mp1, d1, _ := mountT(t, Options{Image: ref, Config: cfg})
	if d1.kernelPath != "" || fsType(t, mp1) != fuseMagic {
		t.Fatalf("first mount served by %q (fs type %#x), want FUSE", d1.kernelPath, fsType(t, mp1))
	}
	sameTree(mp1, "FUSE mount")
	name := kernelImageName(d1.boot)
	state := filepath.Join(dir, name+kernelStateExt)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(state); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no kernel image written within 20s of reading every file")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// 2. The next mount is the kernel's.
	mp2, d2, m2 := mountT(t, Options{Image: ref, Config: cfg})
	if d2.kernelPath != filepath.Join(dir, name+kernelImageExt) || fsType(t, mp2) != erofsMagic {
		t.Fatalf("second mount served by %q (fs type %#x), want the kernel image", d2.kernelPath, fsType(t, mp2))
	}
	if s := d2.Status(mp2); s.ServedBy != "kernel" || s.KernelImage != d2.kernelPath {
		t.Fatalf("status says served by %q from %q", s.ServedBy, s.KernelImage)
	}
	sameTree(mp2, "kernel mount")

	// 3. Unmounted by hand, the daemon exits.
	if err := unix.Unmount(mp2, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m2.done:
	case <-time.After(10 * time.Second):
		t.Fatal("daemon still running 10s after its kernel mount was unmounted")
	}

	// 4. A changed image (here only its mode, so its change time) is
	// written again, not used.
	if err := os.Chmod(d2.kernelPath, 0o644); err != nil {
		t.Fatal(err)
	}
	mp3, d3, _ := mountT(t, Options{Image: ref, Config: cfg})
	if d3.kernelPath != d2.kernelPath || fsType(t, mp3) != erofsMagic {
		t.Fatalf("third mount served by %q (fs type %#x), want a new kernel image", d3.kernelPath, fsType(t, mp3))
	}
	// (The inode number tells nothing: the filesystem may give the new
	// file the old one's. The mode does: a new image is made 0600.)
	if fi, err := os.Stat(d3.kernelPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the changed kernel image was used, not written again (%v, %v)", fi.Mode(), err)
	}
	sameTree(mp3, "kernel mount of the rewritten image")
}
