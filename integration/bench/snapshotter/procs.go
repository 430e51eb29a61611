package main

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// mountDaemons returns the pids of live `damselfly mount` processes whose
// mountpoint is under root.
func mountDaemons(root string) []int {
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
	return pids
}

// unmountUnder detaches every mount below dir, deepest first, and
// returns their mountpoints.
func unmountUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	for _, m := range out {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	return out
}
