package fusemount

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"damselfly/rafs/rafstest"
)

// unmountWays are the ways a mount ends in the loops below, in turn.
var unmountWays = []string{"cancel", "umount", "umount -l", "fusermount3 -u"}

// treeDigest hashes every path, mode and regular file's bytes under dir.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %v\n", rel, d.Type())
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return fmt.Errorf("read %s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the mount: %v", err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// mountsUnder returns the mountinfo lines whose mountpoint is under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(unescapeMountinfo(f[4]), dir) {
			out = append(out, line)
		}
	}
	return out
}

// unmountBy ends the mount at mp from outside the daemon.
func unmountBy(t *testing.T, how, mp string) {
	t.Helper()
	args := strings.Fields(how)
	if out, err := exec.Command(args[0], append(args[1:], mp)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", how, err, out)
	}
}

// TestMountUnmountLoop mounts and unmounts one image 30 times in this
// process, ending each mount another way in turn, and checks that
// nothing is left: no mount, no goroutine, no file descriptor.
func TestMountUnmountLoop(t *testing.T) {
	requireFUSE(t)
	rafstest.RequireTool(t, "fusermount3")
	layout, _ := corpusLayout(t)
	opts := Options{Image: "oci:" + layout + ":meta-rafs", Config: testConfig(t), Mountpoint: t.TempDir(), SelfAccess: true}
	cycle := func(i int, how string) string {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ready := make(chan struct{})
		o := opts
		o.Ready = func(*Daemon) { close(ready) }
		done := make(chan error, 1)
		go func() { done <- Run(ctx, o) }()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("cycle %d: mount: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d: mount not ready after 30s", i)
		}
		sum := treeDigest(t, opts.Mountpoint)
		if how == "cancel" {
			cancel()
		} else {
			unmountBy(t, how, opts.Mountpoint)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("cycle %d (%s): daemon exit: %v", i, how, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("cycle %d (%s): daemon still running 20s after the unmount", i, how)
		}
		if ok, _ := IsMountpoint(opts.Mountpoint); ok {
			t.Fatalf("cycle %d (%s): still mounted", i, how)
		}
		return sum
	}
	// One cycle first, so that what is set up once per process (and
	// kept) is not counted as a leak.
	want := cycle(0, "cancel")
	fds := openFDs(t)
	ignore := goleak.IgnoreCurrent()
	const cycles = 30
	start := time.Now()
	for i := 1; i <= cycles; i++ {
		if got := cycle(i, unmountWays[i%len(unmountWays)]); got != want {
			t.Fatalf("cycle %d: tree digest %s, want %s", i, got, want)
		}
	}
	took := time.Since(start)
	leakErr := goleak.Find(ignore)
	fdsAfter := openFDs(t)
	// Other tests may close descriptors meanwhile; none may be added.
	t.Logf("measured: %d mount/unmount cycles in this process (%s in turn) in %v (%v each); open fds %d before, %d after; leaked goroutines: %v; mounts left: %d",
		cycles, strings.Join(unmountWays, ", "), took.Round(time.Millisecond), (took / cycles).Round(time.Millisecond),
		fds, fdsAfter, leakErr, len(mountsUnder(t, opts.Mountpoint)))
	if leakErr != nil {
		t.Error(leakErr)
	}
	if fdsAfter > fds {
		t.Errorf("open fds %d after the loop, %d before", fdsAfter, fds)
	}
	if m := mountsUnder(t, opts.Mountpoint); len(m) > 0 {
		t.Errorf("mounts left: %q", m)
	}
}

// TestDaemonMountUnmountLoop runs `damselfly mount` 12 times on one
// mountpoint, ending it by SIGTERM, `damselfly umount`, umount and
// umount -l in turn, and checks that every daemon exits cleanly and no
// process or mount is left.
func TestDaemonMountUnmountLoop(t *testing.T) {
	requireFUSE(t)
	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":meta-rafs"
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "cache"))
	mp := t.TempDir()
	bin := damselflyBinary(t)
	ways := []string{"SIGTERM", "damselfly umount", "umount", "umount -l"}
	const cycles = 12
	var pids []int
	start := time.Now()
	var want string
	for i := range cycles {
		cmd := startDaemon(t, ref, mp, cfg)
		pids = append(pids, cmd.Process.Pid)
		sum := treeDigest(t, mp)
		if i == 0 {
			want = sum
		} else if sum != want {
			t.Fatalf("cycle %d: tree digest %s, want %s", i, sum, want)
		}
		how := ways[i%len(ways)]
		switch how {
		case "SIGTERM":
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		case "damselfly umount":
			if out, err := exec.Command(bin, "umount", mp).CombinedOutput(); err != nil {
				t.Fatalf("cycle %d: damselfly umount: %v: %s", i, err, out)
			}
		default:
			unmountBy(t, how, mp)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("cycle %d (%s): daemon exit: %v", i, how, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("cycle %d (%s): daemon still running 20s after the unmount", i, how)
		}
		if ok, _ := IsMountpoint(mp); ok {
			t.Fatalf("cycle %d (%s): still mounted", i, how)
		}
	}
	took := time.Since(start)
	var alive []int
	for _, pid := range pids {
		// A reaped child's pid is gone from /proc unless reused; a reused
		// one runs another program.
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == bin {
			alive = append(alive, pid)
		}
	}
	left := mountsUnder(t, mp)
	t.Logf("measured: %d daemon processes mounted and ended (%s in turn) in %v (%v each); processes left %d, mounts left %d",
		cycles, strings.Join(ways, ", "), took.Round(time.Millisecond), (took / cycles).Round(time.Millisecond), len(alive), len(left))
	if len(alive) > 0 {
		t.Errorf("daemons still running: %v", slices.Sorted(slices.Values(alive)))
	}
	if len(left) > 0 {
		t.Errorf("mounts left: %q", left)
	}
}
