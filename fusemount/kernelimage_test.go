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

	ref, want := unpackedCorpusImage(t, "meta-rafs")
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
	if d1.kernelSource() != "" || fsType(t, mp1) != fuseMagic {
		t.Fatalf("first mount served by %q (fs type %#x), want FUSE", d1.kernelSource(), fsType(t, mp1))
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
	if d2.kernelSource() != filepath.Join(dir, name+kernelImageExt) || fsType(t, mp2) != erofsMagic {
		t.Fatalf("second mount served by %q (fs type %#x), want the kernel image", d2.kernelSource(), fsType(t, mp2))
	}
	if s := d2.Status(mp2); s.ServedBy != "kernel" || s.KernelImage != d2.kernelSource() {
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
	if err := os.Chmod(d2.kernelSource(), 0o644); err != nil {
		t.Fatal(err)
	}
	mp3, d3, _ := mountT(t, Options{Image: ref, Config: cfg})
	if d3.kernelSource() != d2.kernelSource() || fsType(t, mp3) != erofsMagic {
		t.Fatalf("third mount served by %q (fs type %#x), want a new kernel image", d3.kernelSource(), fsType(t, mp3))
	}
	// (The inode number tells nothing: the filesystem may give the new
	// file the old one's. The mode does: a new image is made 0600.)
	if fi, err := os.Stat(d3.kernelSource()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the changed kernel image was used, not written again (%v, %v)", fi.Mode(), err)
	}
	sameTree(mp3, "kernel mount of the rewritten image")
}

// TestLazyKernelMount: with kernel_image.lazy, a mount of an image with
// nothing on the node is the kernel's EROFS over a loop device whose
// backing file the daemon serves; the tree read through it equals the
// unpacked image; once every chunk is on the node the loop device moves
// onto the written kernel image, under the mount, and the daemon's
// private mount goes; unmounted by hand, the daemon exits and leaves
// no loop device behind.
func TestLazyKernelMount(t *testing.T) {
	requireFUSE(t)
	requireEROFS(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		rafstest.SkipOrFail(t, "/dev/loop-control is required: "+err.Error())
	}
	ref, want := unpackedCorpusImage(t, "hardlinks-rafs")
	cfg := testConfig(t)
	cfg.Prefetch.Enable = false
	cfg.KernelImage.Enable = true
	cfg.KernelImage.Lazy = true
	old := kernelImageCheckEvery
	kernelImageCheckEvery = 20 * time.Millisecond
	t.Cleanup(func() { kernelImageCheckEvery = old })
	mp, d, m := mountT(t, Options{Image: ref, Config: cfg})
	dev := d.kernelSource()
	if fsType(t, mp) != erofsMagic || !strings.HasPrefix(dev, "/dev/loop") {
		t.Fatalf("mount served from %q (fs type %#x), want EROFS over a loop device", dev, fsType(t, mp))
	}
	if diff := rafstest.CompareTrees(want, mp); len(diff) > 0 {
		t.Fatalf("lazy kernel mount differs from the unpacked image (want=unpacked, got=mount):\n%s", strings.Join(diff, "\n"))
	}
	if s := d.Status(mp); s.ServedBy != "kernel" || s.ReadBytes["memory"]+s.ReadBytes["oci"]+s.ReadBytes["cache"] == 0 {
		t.Fatalf("status: served by %q, read bytes %v; want the kernel, and reads through the daemon", s.ServedBy, s.ReadBytes)
	}
	loop := filepath.Base(dev)
	// Every chunk is on the node now: the kernel image is written and
	// the loop device moves onto it, under the mount.
	image := filepath.Join(cfg.kernelImagesDir(), kernelImageName(d.boot)+kernelImageExt)
	deadline := time.Now().Add(20 * time.Second)
	for d.kernelSource() != image {
		if time.Now().After(deadline) {
			t.Fatalf("mount still read from %q 20s after every chunk was read, want %s", d.kernelSource(), image)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b, err := os.ReadFile("/sys/block/" + loop + "/loop/backing_file"); err != nil || strings.TrimSpace(string(b)) != image {
		t.Fatalf("%s backed by %q (%v), want %s", loop, b, err, image)
	}
	if data, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(data, []byte("damselfly-image:"+ref)) {
		t.Error("the daemon's private image mount is still mounted after the move to the kernel image")
	}
	if diff := rafstest.CompareTrees(want, mp); len(diff) > 0 {
		t.Fatalf("mount on the kernel image differs from the unpacked image:\n%s", strings.Join(diff, "\n"))
	}
	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Fatal("daemon still running 10s after its mount was unmounted")
	}
	if data, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(data, []byte("damselfly-image:"+ref)) {
		t.Error("the daemon's private image mount is still mounted")
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile("/sys/block/" + loop + "/loop/backing_file")
		if len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still backed by %s after the unmount", loop, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unpackedCorpusImage returns the reference of the corpus image tag and
// a directory holding its tree as rafs.Unpack writes it, for comparing
// mounts against.
func unpackedCorpusImage(t *testing.T, tag string) (ref, dir string) {
	t.Helper()
	layout, _ := corpusLayout(t)
	ref = "oci:" + layout + ":" + tag
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	dir = filepath.Join(t.TempDir(), "unpacked")
	if err := rafs.Unpack(t.Context(), img.Bootstrap(), img.ChunkSource(), dir, rafs.UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	return ref, dir
}
