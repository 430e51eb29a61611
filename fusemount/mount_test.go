package fusemount

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

func requireFUSE(t testing.TB) {
	t.Helper()
	rafstest.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		rafstest.SkipOrFail(t, "/dev/fuse is required: "+err.Error())
	}
}

// corpusLayout writes the default corpus to an OCI layout and converts
// every image to "<name>-rafs" in it, once per test binary.
var corpusOnce struct {
	sync.Once
	dir  string
	imgs []rafstest.Image
	err  error
}

func corpusLayout(t testing.TB) (string, []rafstest.Image) {
	t.Helper()
	corpusOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fusemount-corpus-")
		if err != nil {
			corpusOnce.err = err
			return
		}
		corpusOnce.dir = filepath.Join(dir, "oci")
		corpusOnce.imgs = rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: 64 << 10})
		ctx := context.Background()
		if err := rafstest.WriteOCILayout(ctx, corpusOnce.dir, corpusOnce.imgs...); err != nil {
			corpusOnce.err = err
			return
		}
		for _, img := range corpusOnce.imgs {
			src := "oci:" + corpusOnce.dir + ":" + img.Name
			if _, err := convert.Convert(ctx, src, src+"-rafs", convert.Options{Build: rafs.BuildOptions{ChunkSize: 64 << 10}, WorkDir: dir}); err != nil {
				corpusOnce.err = err
				return
			}
		}
		// One image also with chunks named by their content (blake3),
		// for the tests of what only that algorithm allows.
		src := "oci:" + corpusOnce.dir + ":sizes"
		if _, err := convert.Convert(ctx, src, src+"-rafs-blake3", convert.Options{
			Build: rafs.BuildOptions{ChunkSize: 64 << 10, Digest: rafs.DigestBlake3}, WorkDir: dir}); err != nil {
			corpusOnce.err = err
			return
		}
	})
	if corpusOnce.err != nil {
		t.Fatal(corpusOnce.err)
	}
	return corpusOnce.dir, corpusOnce.imgs
}

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Cache.Dir = filepath.Join(t.TempDir(), "cache")
	cfg.Backend.Deadline = 20 * time.Second
	return cfg
}

// mounted is a daemon started by mountT.
type mounted struct {
	done chan struct{}
	err  error
}

// mountT mounts with Run in the background and unmounts at cleanup,
// failing the test if the daemon does not exit.
func mountT(t testing.TB, opts Options) (string, *Daemon, *mounted) {
	t.Helper()
	requireFUSE(t)
	if opts.Mountpoint == "" {
		opts.Mountpoint = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *Daemon, 1)
	opts.Ready = func(d *Daemon) { ready <- d }
	opts.SelfAccess = true // the test reads the mount from this process
	m := &mounted{done: make(chan struct{})}
	go func() {
		m.err = Run(ctx, opts)
		close(m.done)
	}()
	var d *Daemon
	select {
	case d = <-ready:
	case <-m.done:
		cancel()
		t.Fatalf("mount: %v", m.err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("mount not ready after 60s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.done:
			if m.err != nil {
				t.Errorf("daemon exit: %v", m.err)
			}
		case <-time.After(30 * time.Second):
			t.Error("mount daemon did not exit within 30s of cancellation")
		}
	})
	return opts.Mountpoint, d, m
}

// TestMountEqualsUmoci: for every corpus image, the mounted tree equals
// what umoci unpack makes of the source image, metadata and bytes.
func TestMountEqualsUmoci(t *testing.T) {
	requireFUSE(t)
	rafstest.RequireTool(t, "umoci")
	layout, imgs := corpusLayout(t)
	for _, img := range imgs {
		t.Run(img.Name, func(t *testing.T) {
			want, err := rafstest.UmociUnpack(context.Background(), layout, img.Name, filepath.Join(t.TempDir(), "umoci"))
			if err != nil {
				t.Fatal(err)
			}
			mp, _, _ := mountT(t, Options{Image: "oci:" + layout + ":" + img.Name + "-rafs", Config: testConfig(t)})
			if diff := rafstest.CompareTreesWith(want, mp, rafstest.CompareOptions{IgnoreMtime: img.ImplicitDirs()}); len(diff) > 0 {
				t.Errorf("mounted image differs from umoci unpack (want=umoci, got=mount):\n%s", strings.Join(diff, "\n"))
			}
		})
	}
}

func TestMountSemantics(t *testing.T) {
	layout, _ := corpusLayout(t)
	mp, _, _ := mountT(t, Options{Image: "oci:" + layout + ":hardlinks-rafs", Config: testConfig(t)})
	// Writes are refused with EROFS.
	for _, op := range []func() error{
		func() error { return os.WriteFile(filepath.Join(mp, "new"), []byte("x"), 0o644) },
		func() error { return os.Mkdir(filepath.Join(mp, "newdir"), 0o755) },
		func() error { return os.Chmod(mp, 0o700) },
	} {
		if err := op(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("write operation: got %v, want EROFS", err)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mp, &st); err != nil || st.Files == 0 {
		t.Errorf("statfs: %+v, %v", st, err)
	}
	// Inode numbers are stable across lookups.
	a, err := os.Lstat(mp)
	if err != nil {
		t.Fatal(err)
	}
	if a.Sys().(*syscall.Stat_t).Ino != uint64(rafs.RootIno) {
		t.Errorf("root inode: got %d, want %d", a.Sys().(*syscall.Stat_t).Ino, rafs.RootIno)
	}
}

// TestConcurrentRandomReads: many goroutines read random ranges of random
// files; every byte must equal the source.
func TestConcurrentRandomReads(t *testing.T) {
	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":sizes-rafs"
	cfg := testConfig(t)
	cfg.MemoryBytes = 1 << 20 // force traffic to the node cache and backend
	mp, _, _ := mountT(t, Options{Image: ref, Config: cfg})
	img, err := image.Open(context.Background(), ref, image.Options{Transport: transport.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	fsys := img.FS(context.Background())
	var files []string
	var sizes []int64
	ents, err := fsys.ReadDir("sizes")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		p := "sizes/" + e.Name()
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = data
		files = append(files, p)
		sizes = append(sizes, int64(len(data)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 200 {
				i := r.IntN(len(files))
				if sizes[i] == 0 {
					continue
				}
				off := r.Int64N(sizes[i])
				n := 1 + r.Int64N(min(sizes[i]-off, 300<<10))
				f, err := os.Open(filepath.Join(mp, files[i]))
				if err != nil {
					errs <- err
					return
				}
				buf := make([]byte, n)
				_, err = f.ReadAt(buf, off)
				f.Close()
				if err != nil && err != io.EOF {
					errs <- err
					return
				}
				if !bytes.Equal(buf, want[files[i]][off:off+n]) {
					errs <- errors.New(files[i] + ": bytes differ")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestControlAPI(t *testing.T) {
	layout, _ := corpusLayout(t)
	mp, _, _ := mountT(t, Options{Image: "oci:" + layout + ":sizes-rafs", Config: testConfig(t)})
	if _, err := os.ReadFile(filepath.Join(mp, "sizes", "one-chunk-plus-one")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	filepath.WalkDir(mp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			os.ReadFile(p)
		}
		return nil
	})
	st, err := QueryStatus(context.Background(), mp, "")
	if err != nil {
		t.Fatal(err)
	}
	var reads uint64
	for _, n := range st.Reads {
		reads += n
	}
	if st.State != "running" || st.PID != os.Getpid() || reads == 0 || st.Files == 0 || st.Cache == nil {
		t.Errorf("status: got %+v", st)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", SocketPath(mp))
	}}}
	resp, err := c.Get("http://daemon/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"damselfly_mount_reads_total", "damselfly_mount_read_seconds_bucket", "damselfly_cache_bytes", "damselfly_mount_prefetch_total_chunks", "go_goroutines"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
