package fusemount

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

func TestExternalUnmountStopsDaemon(t *testing.T) {
	layout, _ := corpusLayout(t)
	for _, how := range []string{"umount", "umount -l", "fusermount3 -u"} {
		t.Run(how, func(t *testing.T) {
			if strings.HasPrefix(how, "fusermount3") {
				rafstest.RequireTool(t, "fusermount3")
			}
			mp, _, done := mountT(t, Options{Image: "oci:" + layout + ":symlinks-rafs", Config: testConfig(t)})
			args := strings.Fields(how)
			start := time.Now()
			if out, err := exec.Command(args[0], append(args[1:], mp)...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v: %s", how, err, out)
			}
			select {
			case <-done.done:
				if done.err != nil {
					t.Fatalf("daemon exit: %v", done.err)
				}
				t.Logf("measured: %s to daemon exit: %v", how, time.Since(start).Round(time.Millisecond))
			case <-time.After(20 * time.Second):
				t.Fatal("daemon still running 20s after external unmount")
			}
			if ok, _ := IsMountpoint(mp); ok {
				t.Error("mountpoint still mounted")
			}
		})
	}
}

func TestAlreadyMounted(t *testing.T) {
	layout, _ := corpusLayout(t)
	mp, _, _ := mountT(t, Options{Image: "oci:" + layout + ":names-rafs", Config: testConfig(t)})
	err := Run(context.Background(), Options{Image: "oci:" + layout + ":names-rafs", Mountpoint: mp, Config: testConfig(t)})
	if !errors.Is(err, ErrAlreadyMounted) {
		t.Fatalf("second mount: got %v, want ErrAlreadyMounted", err)
	}
}

// buildBinary builds cmd/damselfly once for the subprocess tests.
var binOnce struct {
	sync.Once
	path string
	err  error
}

func damselflyBinary(t testing.TB) string {
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "damselfly-bin-")
		if err != nil {
			binOnce.err = err
			return
		}
		binOnce.path = filepath.Join(dir, "damselfly")
		out, err := exec.Command("go", "build", "-o", binOnce.path, "damselfly/cmd/damselfly").CombinedOutput()
		if err != nil {
			binOnce.err = errors.New(string(out))
		}
	})
	if binOnce.err != nil {
		t.Fatalf("build damselfly: %v", binOnce.err)
	}
	return binOnce.path
}

// lockedBuffer is a daemon's output, readable while the daemon writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemonLogs holds each started daemon's output, by its *exec.Cmd.
var daemonLogs sync.Map

// diagnose describes mp and cmd's daemon for a failure message: the
// mount table's lines for mp and the daemon's output so far.
func diagnose(cmd *exec.Cmd, mp string) string {
	var b strings.Builder
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, mp) {
				b.WriteString("mountinfo: " + l + "\n")
			}
		}
	}
	if out, ok := daemonLogs.Load(cmd); ok {
		b.WriteString("daemon output:\n" + out.(*lockedBuffer).String())
	}
	return b.String()
}

// startDaemon runs `damselfly mount` as a process and waits for the mount.
func startDaemon(t *testing.T, ref, mp, cfgFile string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(damselflyBinary(t), "mount", "--config", cfgFile, ref, mp)
	out := new(lockedBuffer)
	daemonLogs.Store(cmd, out)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		syscall.Unmount(mp, syscall.MNT_DETACH)
	})
	rafstest.Eventually(t, 30*time.Second, "daemon to mount", func() bool {
		ok, _ := IsMountpoint(mp)
		var sfs syscall.Statfs_t
		return ok && syscall.Statfs(mp, &sfs) == nil && sfs.Files > 0
	})
	return cmd
}

func writeConfig(t *testing.T, cacheDir string) string {
	p := filepath.Join(t.TempDir(), "mount.yaml")
	if err := os.WriteFile(p, []byte("cache:\n  dir: "+cacheDir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSignalsAndStaleMounts(t *testing.T) {
	requireFUSE(t)
	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":meta-rafs"
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "cache"))
	mp := t.TempDir()

	// SIGTERM unmounts and exits.
	cmd := startDaemon(t, ref, mp, cfg)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	if ok, _ := IsMountpoint(mp); ok {
		t.Fatal("still mounted after SIGTERM")
	}
	t.Logf("measured: SIGTERM to daemon exit, unmounted: %v", time.Since(start).Round(time.Millisecond))

	// SIGKILL leaves a stale mount (ENOTCONN); the next start cleans it.
	cmd = startDaemon(t, ref, mp, cfg)
	cmd.Process.Kill()
	cmd.Wait()
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mp, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after SIGKILL: statfs got %v, want ENOTCONN", err)
	}
	start = time.Now()
	cmd = startDaemon(t, ref, mp, cfg)
	t.Logf("measured: start over the stale mount to mounted and serving: %v", time.Since(start).Round(time.Millisecond))
	if _, err := os.ReadDir(filepath.Join(mp, "meta")); err != nil {
		t.Fatalf("remounted over a stale mount: %v\n%s", err, diagnose(cmd, mp))
	}
	if out, err := exec.Command(damselflyBinary(t), "umount", mp).CombinedOutput(); err != nil {
		t.Fatalf("damselfly umount: %v: %s", err, out)
	}
	if ok, _ := IsMountpoint(mp); ok {
		t.Fatal("still mounted after damselfly umount")
	}
	// damselfly umount waits for the daemon: nothing of it is left.
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after damselfly umount: %v", err)
	}
	if n := daemonsOn(t, mp); n != 0 {
		t.Errorf("%d damselfly processes still name %s", n, mp)
	}
	t.Logf("measured: 0 damselfly processes and no mount left on %s", mp)
}

// daemonsOn counts the processes whose command line names mountpoint mp.
func daemonsOn(t *testing.T, mp string) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if arg == mp {
				n++
				break
			}
		}
	}
	return n
}

// TestCacheDeletedUnderMount: removing the node cache directory while
// mounted never turns into EIO; chunks are fetched again.
func TestCacheDeletedUnderMount(t *testing.T) {
	layout, _ := corpusLayout(t)
	cfg := testConfig(t)
	cfg.MemoryBytes = 1 << 20
	cfg.Prefetch.Enable = false
	mp, _, _ := mountT(t, Options{Image: "oci:" + layout + ":sizes-rafs", Config: cfg})
	var files []string
	filepath.WalkDir(mp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	for i, p := range files {
		if i == len(files)/2 {
			removeAllWhileWritten(t, cfg.Cache.Dir)
		}
		if _, err := os.ReadFile(p); err != nil {
			t.Fatalf("read %s after the cache was deleted: %v", p, err)
		}
	}
}

// flakyRegistry serves a go-containerregistry registry and can corrupt or
// refuse blob range requests.
type flakyRegistry struct {
	h        http.Handler
	corrupt  atomic.Int32 // corrupt this many blob responses
	fail     atomic.Int32 // answer 503 to this many blob requests
	blobGets atomic.Int32
}

func (f *flakyRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && r.Header.Get("Range") != "" {
		f.blobGets.Add(1)
		if f.fail.Add(-1) >= 0 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		if f.corrupt.Add(-1) >= 0 {
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			if len(body) > 0 {
				body[len(body)/2] ^= 0xff
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(body)
			return
		}
	}
	f.h.ServeHTTP(w, r)
}

func pushToRegistry(t *testing.T, layout, tag string) (*flakyRegistry, string) {
	t.Helper()
	fr := &flakyRegistry{h: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(fr)
	t.Cleanup(srv.Close)
	return fr, copyToRegistry(t, layout, tag, strings.TrimPrefix(srv.URL, "http://"))
}

func TestRegistryFaults(t *testing.T) {
	layout, _ := corpusLayout(t)
	fr, ref := pushToRegistry(t, layout, "sizes-rafs")
	// The expected bytes come from the local copy, not the flaky registry.
	img, err := image.Open(context.Background(), "oci:"+layout+":sizes-rafs", image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	fsys := img.FS(context.Background())

	cfg := testConfig(t)
	cfg.Prefetch.Enable = false
	fr.corrupt.Store(2)
	fr.fail.Store(3)
	mp, d, _ := mountT(t, Options{Image: ref, Config: cfg})
	err = fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		want, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(mp, p))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return errors.New(p + ": bytes differ")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st := d.Status(mp)
	if st.Verify < 1 {
		t.Errorf("verify failures: got %d, want >= 1 (corrupt responses were served)", st.Verify)
	}
	if st.Errors != 0 {
		t.Errorf("read errors: got %d, want 0", st.Errors)
	}
	if fr.corrupt.Load() > 0 || fr.fail.Load() > 0 {
		t.Errorf("faults not all consumed: corrupt %d fail %d", fr.corrupt.Load(), fr.fail.Load())
	}
}

// A read of a chunk the registry cannot serve fails with EIO once the
// backend's deadline has passed, not twice that: when the kernel's
// readahead of the page fails it retries the page at once, and the mount
// answers that retry with the failure it just gave. Once the registry is
// back (and the hold has passed) the same read succeeds.
func TestReadFailsAtDeadlineOnce(t *testing.T) {
	layout, _ := corpusLayout(t)
	fr, ref := pushToRegistry(t, layout, "sizes-rafs")
	img, err := image.Open(context.Background(), "oci:"+layout+":sizes-rafs", image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	fsys := img.FS(context.Background())
	var largest string
	var size int64
	fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil && info.Size() > size {
				largest, size = p, info.Size()
			}
		}
		return nil
	})
	want, err := fs.ReadFile(fsys, largest)
	if err != nil {
		t.Fatal(err)
	}

	const deadline = 3 * time.Second
	cfg := testConfig(t)
	cfg.Prefetch.Enable = false
	cfg.Backend.Deadline = deadline
	mp, _, _ := mountT(t, Options{Image: ref, Config: cfg})
	fr.fail.Store(1 << 30) // every blob range request answers 503
	start := time.Now()
	f, err := os.Open(filepath.Join(mp, largest))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(make([]byte, 4096))
	f.Close()
	elapsed := time.Since(start)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of %s with the registry failing: got %v, want EIO", largest, err)
	}
	// A second wait for the deadline would end after 2*deadline.
	if elapsed < deadline || elapsed > deadline*9/5 {
		t.Errorf("read failed after %s, want soon after the %s deadline", elapsed, deadline)
	}

	// The hold answered only the kernel's retry through that handle: a
	// new read tries again, and works.
	fr.fail.Store(0)
	got, err := os.ReadFile(filepath.Join(mp, largest))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the registry recovered: %v (%d bytes, want %d)", err, len(got), len(want))
	}
}

// removeAllWhileWritten deletes dir by hand the way an operator would,
// while the daemon may still be writing into it (a run's tail lands in
// the cache after its reader has been served): RemoveAll can then meet a
// directory that a new file made non-empty again, so it tries until the
// tree is gone.
func removeAllWhileWritten(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for err := os.RemoveAll(dir); err != nil; err = os.RemoveAll(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("remove %s: %v", dir, err)
		}
	}
}
