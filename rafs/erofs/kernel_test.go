package erofs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/erofs"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// requireKernelEROFS skips (or, in CI, fails) unless this process may
// mount and the kernel has EROFS.
func requireKernelEROFS(t *testing.T) {
	t.Helper()
	rafstest.RequireRoot(t)
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil || !bytes.Contains(fss, []byte("\terofs\n")) {
		rafstest.SkipOrFail(t, "the kernel's EROFS is required (not in /proc/filesystems)")
	}
}

// convertCorpus writes the corpus (small chunks, so files span several)
// as an OCI layout, converts every image and returns them opened.
func convertCorpus(t testing.TB) map[string]*image.Image {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	layout := filepath.Join(dir, "oci")
	imgs := append(rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: 64 << 10}), edges())
	if err := rafstest.WriteOCILayout(ctx, layout, imgs...); err != nil {
		t.Fatal(err)
	}
	out := map[string]*image.Image{}
	for _, img := range imgs {
		dst := "oci:" + layout + ":" + img.Name + "-rafs"
		if _, err := convert.Convert(ctx, "oci:"+layout+":"+img.Name, dst, convert.Options{
			Build: rafs.BuildOptions{ChunkSize: 64 << 10}, WorkDir: dir,
		}); err != nil {
			t.Fatalf("convert %s: %v", img.Name, err)
		}
		ri, err := image.Open(ctx, dst, image.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ri.Close() })
		out[img.Name] = ri
	}
	return out
}

// edges is an image aimed at the layout's limits: directories of many
// blocks, names that sort before "." and "..", xattrs too big for an
// inode's block (so its directory content cannot be inline), file sizes
// around the block size, and a file of many chunks.
func edges() rafstest.Image {
	t0 := time.Date(2022, 1, 2, 3, 4, 5, 6, time.UTC)
	reg := func(name string, data []byte) rafstest.Entry {
		return rafstest.Entry{
			Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: t0, Format: tar.FormatPAX},
			Data: func(w io.Writer) error { _, err := w.Write(data); return err },
		}
	}
	dir := func(name string) rafstest.Entry {
		return rafstest.Entry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: t0, Format: tar.FormatPAX}}
	}
	var l rafstest.Layer
	l = append(l, dir("big"))
	for i := range 1500 {
		l = append(l, reg(fmt.Sprintf("big/%0*d", 1+i%120, i), []byte(strconv.Itoa(i))))
	}
	l = append(l, dir("sorts"))
	for _, n := range []string{"!bang", "+plus", "-dash", ",comma", ".hidden", "..dots", "a", "\x01ctl"} {
		l = append(l, reg("sorts/"+n, []byte(n)))
	}
	huge := strings.Repeat("x", 3900)
	l = append(l, dir("fat").Xattr("user.big", huge))
	for i := range 40 {
		l = append(l, reg(fmt.Sprintf("fat/child-%02d", i), nil))
	}
	l = append(l, reg("fat-file", []byte("payload")).Xattr("user.big", huge).Xattr("user.small", "v").Xattr("trusted.t", "w"))
	for _, n := range []int{1, 4095, 4096, 4097, 8192, 200 << 10} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*31 + n)
		}
		l = append(l, reg(fmt.Sprintf("size-%d", n), data))
	}
	return rafstest.Image{Name: "erofs-edges", Layers: []rafstest.Layer{l}}
}

// mountImage mounts the EROFS image file at path read-only on a new
// directory, file-backed, and unmounts it when the test ends.
func mountImage(t *testing.T, path string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(path, mnt, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		t.Fatalf("mount erofs %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return mnt
}

// TestKernelMountsCorpus writes the EROFS image of every corpus image,
// mounts it with the kernel's EROFS and compares the tree, file for file
// (bytes, modes, owners, mtimes, xattrs, hardlink groups, symlinks and
// devices), with the same image unpacked by rafs.Unpack; and, where
// erofs-utils is installed, has fsck.erofs check the image.
func TestKernelMountsCorpus(t *testing.T) {
	requireKernelEROFS(t)
	imgs := convertCorpus(t)
	for name, img := range imgs {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			want := filepath.Join(dir, "unpacked")
			if err := rafs.Unpack(ctx, img.Bootstrap(), img.ChunkSource(), want, rafs.UnpackOptions{}); err != nil {
				t.Fatal(err)
			}
			path := writeImage(t, ctx, img, filepath.Join(dir, "image.erofs"))
			fsck(t, path)
			got := mountImage(t, path)
			if diff := rafstest.CompareTrees(want, got); len(diff) > 0 {
				t.Errorf("EROFS mount differs from the unpacked image (want=unpacked, got=erofs):\n%s", strings.Join(diff, "\n"))
			}
		})
	}
}

// writeImage builds img's EROFS image and writes it to path.
func writeImage(t *testing.T, ctx context.Context, img *image.Image, path string) string {
	t.Helper()
	im, err := erofs.Build(img.Bootstrap())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := im.WriteTo(ctx, f, img.ChunkSource())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n != im.Size() {
		t.Fatalf("wrote %d bytes, want the image's size %d", n, im.Size())
	}
	return path
}

// fsck runs erofs-utils' checker over the image, when it is installed.
func fsck(t *testing.T, path string) {
	t.Helper()
	bin, err := exec.LookPath("fsck.erofs")
	if err != nil {
		rafstest.SkipOrFail(t, "fsck.erofs is required (make test installs erofs-utils): "+err.Error())
	}
	out, err := exec.Command(bin, path).CombinedOutput()
	if err != nil {
		t.Errorf("fsck.erofs %s: %v\n%s", path, err, out)
	}
}
