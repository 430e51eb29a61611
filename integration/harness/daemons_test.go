package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

// MountDaemons finds a process by its mount arguments under root, and not
// once it has exited (a zombie not yet reaped included).
func TestMountDaemons(t *testing.T) {
	root := t.TempDir()
	other := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", "sleep 30", "mount", filepath.Join(root, "mounts", "0123", "mnt"))
	elsewhere := exec.Command("/bin/sh", "-c", "sleep 30", "mount", filepath.Join(other, "mounts", "0123", "mnt"))
	for _, c := range []*exec.Cmd{cmd, elsewhere} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	// The shell may fork to run sleep: until the child execs, it has the
	// shell's arguments too, so the answer settles within moments.
	want := []int{cmd.Process.Pid}
	settle := time.Now().Add(5 * time.Second)
	for got := MountDaemons(root); !slices.Equal(got, want); got = MountDaemons(root) {
		if time.Now().After(settle) {
			t.Fatalf("MountDaemons = %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for len(MountDaemons(root)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("MountDaemons = %v after the kill, want none (a zombie counts as gone)", MountDaemons(root))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// UnmountUnder detaches the mounts below a directory, deepest first,
// and leaves the directory's own mount alone.
func TestUnmountUnder(t *testing.T) {
	rafstest.RequireRoot(t)
	dir := t.TempDir()
	top, deep := filepath.Join(dir, "a"), filepath.Join(dir, "a", "b")
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", top, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(top, syscall.MNT_DETACH) })
	if err := os.Mkdir(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", deep, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(deep, syscall.MNT_DETACH) })
	got, err := UnmountUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{deep, top}) {
		t.Errorf("UnmountUnder = %v, want [%s %s]", got, deep, top)
	}
	if left, err := UnmountUnder(dir); err != nil || len(left) != 0 {
		t.Errorf("mounts left below %s: %v, %v", dir, left, err)
	}
}
