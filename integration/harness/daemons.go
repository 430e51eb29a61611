package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// MountDaemons returns, sorted, the pids of the live (not zombie)
// `damselfly mount` processes whose mountpoint is under root/mounts: the
// mount daemons a `damselfly snapshotter` with that root started.
func MountDaemons(root string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !slices.Contains(args, "mount") || !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, root+"/mounts/") }) {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// UnmountUnder detaches every mount below dir, deepest first, and
// returns their mountpoints: what a test or benchmark run left mounted
// (overlays of containers, FUSE mounts of daemons it killed). The error
// joins the unmounts that failed.
func UnmountUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var under []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// Field 5 is the mountpoint, with space, tab, newline and
		// backslash octal-escaped; the directories callers pass have
		// none of them.
		if f := strings.Fields(sc.Text()); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			under = append(under, f[4])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(under, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, mp := range under {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return under, errors.Join(errs...)
}
