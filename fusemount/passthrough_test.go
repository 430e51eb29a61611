package fusemount

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"damselfly/rafs"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// passthroughMount mounts the sizes image with file copies and returns
// the mountpoint, the daemon, the largest file's path, inode and bytes.
func passthroughMount(t *testing.T, cfg Config, caps uint64) (string, *Daemon, string, rafs.Inode, []byte) {
	t.Helper()
	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":sizes-rafs"
	cfg.Prefetch.Enable = false
	mp, d, _ := mountT(t, Options{Image: ref, Config: cfg, disabledCaps: caps})
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	p, in := largestFile(t, d.boot)
	want, err := fs.ReadFile(img.FS(t.Context()), p)
	if err != nil {
		t.Fatal(err)
	}
	if in.DataCount < 2 {
		t.Fatalf("largest file %s has %d chunks; the test wants several", p, in.DataCount)
	}
	return mp, d, p, in, want
}

func requirePassthrough(t *testing.T, d *Daemon) {
	t.Helper()
	if d.server.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		rafstest.SkipOrFail(t, "the kernel does not offer FUSE_PASSTHROUGH")
	}
}

// waitCopy waits until the copy of in is in the store.
func waitCopy(t *testing.T, d *Daemon, in rafs.Inode) string {
	t.Helper()
	name, err := fileCopyName(d.boot, in)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !d.copies.Has(name) {
		if time.Now().After(deadline) {
			t.Fatalf("no copy of inode %d written within 10s", in.Ino)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return d.copies.path(name)
}

// readChecked reads path whole and compares it with want.
func readChecked(t *testing.T, path string, want []byte, what string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the image's %d", what, len(got), len(want))
	}
}

// mmapChecked maps f shared for reading, and private for execution as
// ld.so maps a library, and compares both mappings with want.
func mmapChecked(t *testing.T, f *os.File, want []byte, what string) {
	t.Helper()
	for _, mode := range []struct {
		prot, flags int
	}{
		{syscall.PROT_READ, syscall.MAP_SHARED},
		{syscall.PROT_READ | syscall.PROT_EXEC, syscall.MAP_PRIVATE},
	} {
		m, err := syscall.Mmap(int(f.Fd()), 0, len(want), mode.prot, mode.flags)
		if err != nil {
			t.Fatalf("%s: mmap (prot %#x, flags %#x): %v", what, mode.prot, mode.flags, err)
		}
		same := bytes.Equal(m, want)
		syscall.Munmap(m)
		if !same {
			t.Fatalf("%s: mapped bytes (prot %#x, flags %#x) differ from the image's", what, mode.prot, mode.flags)
		}
	}
}

// A file read once through the daemon gets a copy; its next opens are
// passthrough: the same bytes by read and by mmap, and no READ reaches
// the daemon.
func TestPassthroughAfterRead(t *testing.T) {
	mp, d, p, in, want := passthroughMount(t, copiesConfig(t), 0)
	requirePassthrough(t, d)
	path := filepath.Join(mp, p)
	readChecked(t, path, want, "first read")
	if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 0 {
		t.Fatalf("first open: %v passthrough opens, want 0 (no copy yet)", n)
	}
	cp := waitCopy(t, d, in)
	if got, err := os.ReadFile(cp); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy %s: %v, or bytes differ from the image's", cp, err)
	}

	reads := counter(d.metrics, "damselfly_mount_reads_total")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A second handle of the same inode while the first is open joins
	// its mode and backing file.
	g, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 2 {
		t.Errorf("two opens after the copy: %v passthrough opens, want 2", n)
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("passthrough read: %v, or bytes differ", err)
	}
	mmapChecked(t, g, want, "passthrough mmap")
	g.Close()
	if n := counter(d.metrics, "damselfly_mount_reads_total") - reads; n != 0 {
		t.Errorf("passthrough reads: the daemon served %v reads, want 0", n)
	}
	st := d.Status(mp)
	if st.Passthrough != 2 || st.FileCopies == nil || st.FileCopies.Copies < 1 || st.FileCopies.Bytes < int64(len(want)) {
		t.Errorf("status: passthrough %d, file copies %+v", st.Passthrough, st.FileCopies)
	}
}

// While a handle opened through the daemon is open, new opens of the
// inode stay in that mode even when a copy appears (the kernel refuses
// to mix modes on an inode); once it is closed, opens are passthrough.
func TestPassthroughWaitsForCachedHandles(t *testing.T) {
	mp, d, p, in, want := passthroughMount(t, copiesConfig(t), 0)
	requirePassthrough(t, d)
	path := filepath.Join(mp, p)
	readChecked(t, path, want, "first read") // every chunk now cached
	waitCopy(t, d, in)
	name, _ := fileCopyName(d.boot, in)
	os.Remove(d.copies.path(name))

	h1, err := os.Open(path) // no copy: through the daemon
	if err != nil {
		t.Fatal(err)
	}
	if err := d.fsys.pt.fill(in); err != nil {
		t.Fatal(err)
	}
	h2, err := os.Open(path)
	if err != nil {
		t.Fatalf("open with a copy while a cached handle is open: %v", err)
	}
	if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 0 {
		t.Errorf("opens beside a cached handle: %v passthrough, want 0", n)
	}
	mmapChecked(t, h2, want, "mmap beside a cached handle")
	h1.Close()
	h2.Close()
	// RELEASE is sent after close returns: wait for it to arrive.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.fsys.pt.mu.Lock()
		open := d.fsys.pt.inodes[in.Ino] != nil
		d.fsys.pt.mu.Unlock()
		if !open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("handles not released within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h3, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close()
	if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 1 {
		t.Errorf("open after the cached handles closed: %v passthrough opens, want 1", n)
	}
	mmapChecked(t, h3, want, "passthrough mmap")
}

// A copy that is gone or of the wrong size is never served: the open
// goes through the daemon with the image's bytes, a wrong copy is
// deleted, and a new copy is written once the handle closes.
func TestPassthroughDamagedCopy(t *testing.T) {
	damage := []struct {
		name string
		do   func(path string, size int) error
	}{
		{"evicted", func(p string, _ int) error { return os.Remove(p) }},
		{"truncated", func(p string, size int) error { return os.Truncate(p, int64(size/2)) }},
		{"empty", func(p string, _ int) error { return os.Truncate(p, 0) }},
		{"longer", func(p string, _ int) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.Write([]byte("garbage"))
			return errors.Join(err, f.Close())
		}},
		{"directory", func(p string, _ int) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o700)
		}},
	}
	for _, dm := range damage {
		t.Run(dm.name, func(t *testing.T) {
			mp, d, p, in, want := passthroughMount(t, copiesConfig(t), 0)
			requirePassthrough(t, d)
			path := filepath.Join(mp, p)
			readChecked(t, path, want, "first read")
			cp := waitCopy(t, d, in)
			if err := dm.do(cp, len(want)); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			// Drop what the first read left in the page cache, so that
			// these bytes come from the daemon.
			if err := fadviseDontNeed(f); err != nil {
				t.Fatal(err)
			}
			reads := counter(d.metrics, "damselfly_mount_reads_total")
			got, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read over a damaged copy: %v, or bytes differ", err)
			}
			mmapChecked(t, f, want, "mmap over a damaged copy")
			f.Close()
			if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 0 {
				t.Errorf("%v passthrough opens over a damaged copy, want 0", n)
			}
			if n := counter(d.metrics, "damselfly_mount_reads_total") - reads; n == 0 {
				t.Errorf("the daemon served no read over a damaged copy")
			}
			waitCopy(t, d, in)
			if got, err := os.ReadFile(cp); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("rewritten copy: %v, or bytes differ", err)
			}
			readChecked(t, path, want, "read after the copy was rewritten")
			if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 1 {
				t.Errorf("open after the copy was rewritten: %v passthrough opens, want 1", n)
			}
		})
	}
}

// refusing is a kernel that refuses every backing file, as it does a
// daemon without CAP_SYS_ADMIN.
type refusing struct{ backingFiles }

func (refusing) RegisterBackingFd(*fuse.BackingMap) (int32, syscall.Errno) { return 0, syscall.EPERM }

// When the kernel refuses a backing file, that open and every later one
// go through the daemon, and the daemon goes back to open-less reads.
func TestPassthroughRefused(t *testing.T) {
	mp, d, p, in, want := passthroughMount(t, copiesConfig(t), 0)
	requirePassthrough(t, d)
	if d.server.KernelSettings().Flags64()&fuse.CAP_NO_OPEN_SUPPORT == 0 {
		rafstest.SkipOrFail(t, "the kernel does not offer FUSE_NO_OPEN_SUPPORT")
	}
	d.fsys.pt.enable(refusing{d.server})
	path := filepath.Join(mp, p)
	readChecked(t, path, want, "first read")
	waitCopy(t, d, in)
	handles := func() uint64 {
		d.fsys.mu.Lock()
		defer d.fsys.mu.Unlock()
		return d.fsys.nextFh
	}
	before := handles()
	for i := range 3 {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := fadviseDontNeed(f); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %d after a refusal: %v, or bytes differ", i, err)
		}
		mmapChecked(t, f, want, fmt.Sprintf("mmap %d after a refusal", i))
		f.Close()
	}
	if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 0 {
		t.Errorf("%v passthrough opens after a refusal, want 0", n)
	}
	// The open refused made a handle; the ones after it are open-less.
	if n := handles() - before; n != 1 {
		t.Errorf("%d handles made after a refusal, want 1 (then open-less reads)", n)
	}
}

func fadviseDontNeed(f *os.File) error {
	const fadvDontNeed = 4
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Without passthrough (file copies off, or a kernel not offered it)
// files read as before and no copy is served.
func TestPassthroughOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		caps uint64
	}{
		{"config", func(c *Config) { c.FileCopies.Enable = false }, 0},
		{"kernel", func(*Config) {}, fuse.CAP_PASSTHROUGH},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := copiesConfig(t)
			tc.cfg(&cfg)
			mp, d, p, _, want := passthroughMount(t, cfg, tc.caps)
			path := filepath.Join(mp, p)
			for i := range 3 {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(f)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("read %d: %v, or bytes differ", i, err)
				}
				mmapChecked(t, f, want, fmt.Sprintf("mmap %d", i))
				f.Close()
				time.Sleep(50 * time.Millisecond) // time for a (wrong) fill
			}
			if n := counter(d.metrics, "damselfly_mount_passthrough_opens_total"); n != 0 {
				t.Errorf("%v passthrough opens, want 0", n)
			}
			if tc.name == "config" {
				if d.copies != nil || d.fsys.pt != nil {
					t.Error("file copies set up though disabled")
				}
				if _, err := os.Stat(filepath.Join(cfg.Cache.Dir, FilesDirName)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("file copy directory: %v, want none", err)
				}
			}
		})
	}
}

// The store keeps its bytes within capacity, evicting the least
// recently opened copies first, refuses a copy bigger than the
// capacity, and a new process finds the copies left on disk.
func TestFileCopiesCapacity(t *testing.T) {
	dir := t.TempDir()
	const mib = 1 << 20
	fc, err := openFileCopies(dir, 3*mib, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("%02x%062x", i, i) }
	put := func(i int, size int) error {
		return fc.Put(name(i), uint64(size), func(w io.Writer) error {
			_, err := w.Write(bytes.Repeat([]byte{byte(i)}, size))
			return err
		})
	}
	for i := range 3 {
		if err := put(i, mib); err != nil {
			t.Fatal(err)
		}
	}
	if fd, ok := fc.Open(name(0), mib); ok { // 0 is now the most recent
		syscall.Close(fd)
	} else {
		t.Fatal("copy 0 not found")
	}
	if err := put(3, mib); err != nil {
		t.Fatal(err)
	}
	exists := func(i int) bool { _, err := os.Stat(fc.path(name(i))); return err == nil }
	for i, want := range []bool{true, false, true, true} {
		if exists(i) != want {
			t.Errorf("copy %d on disk: %v, want %v", i, exists(i), want)
		}
	}
	if b, n, e := fc.Stats(); b > 3*mib || n != 3 || e != 1 {
		t.Errorf("stats: %d bytes in %d copies, %d evicted; want <= %d in 3, 1 evicted", b, n, e, 3*mib)
	}
	if err := put(9, 4*mib); !errors.Is(err, errCopyTooBig) {
		t.Errorf("copy over the capacity: got %v, want errCopyTooBig", err)
	}
	// A writer that produces the wrong size leaves nothing behind.
	err = fc.Put(name(7), mib, func(w io.Writer) error { _, err := w.Write([]byte("short")); return err })
	if err == nil || exists(7) {
		t.Errorf("short copy: got %v, on disk %v; want an error and no file", err, exists(7))
	}
	if _, ok := fc.Open(name(2), 2*mib); ok || exists(2) {
		t.Error("a copy of the wrong size was opened or kept")
	}

	// A new store over the same directory sees what is there, and
	// evicts down to its own (smaller) capacity.
	fc2, err := openFileCopies(dir, 1*mib, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := fc2.rescan(); err != nil { // as its first put would
		t.Fatal(err)
	}
	if b, n, _ := fc2.Stats(); b > mib || n != 1 {
		t.Errorf("reopened with 1 MiB: %d bytes in %d copies, want 1 MiB in 1", b, n)
	}
}

// Through a mount, the copies stay within a capacity smaller than the
// image's files, and every file reads right whether or not it has one.
func TestPassthroughCapacityOnMount(t *testing.T) {
	cfg := copiesConfig(t)
	cfg.FileCopies.Capacity = 1 << 20
	mp, d, _, _, _ := passthroughMount(t, cfg, 0)
	requirePassthrough(t, d)
	img, err := image.Open(t.Context(), "oci:"+corpusOnce.dir+":sizes-rafs", image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	fsys := img.FS(t.Context())
	var total int64
	for round := range 3 {
		err := fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			want, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			if round == 0 {
				total += int64(len(want))
			}
			readChecked(t, filepath.Join(mp, p), want, fmt.Sprintf("round %d: %s", round, p))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // fills of the round's files
	}
	if total <= cfg.FileCopies.Capacity {
		t.Fatalf("the image's files hold %d bytes, not more than the capacity %d: the test proves nothing", total, cfg.FileCopies.Capacity)
	}
	var onDisk int64
	ents, err := os.ReadDir(d.copies.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			onDisk += fi.Size()
		}
	}
	b, _, evicted := d.copies.Stats()
	if onDisk > cfg.FileCopies.Capacity || b > cfg.FileCopies.Capacity {
		t.Errorf("copies hold %d bytes on disk (%d indexed), capacity %d", onDisk, b, cfg.FileCopies.Capacity)
	}
	if evicted == 0 || counter(d.metrics, "damselfly_mount_passthrough_opens_total") == 0 {
		t.Errorf("%d evictions, %v passthrough opens: want both above 0", evicted, counter(d.metrics, "damselfly_mount_passthrough_opens_total"))
	}
}

// copiesConfig is testConfig with file copies on (they are off by
// default).
func copiesConfig(t testing.TB) Config {
	cfg := testConfig(t)
	cfg.FileCopies.Enable = true
	return cfg
}
