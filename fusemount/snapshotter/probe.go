package snapshotter

// The state a daemon leaves on disk (daemon.json, its log) and what the
// snapshotter asks the kernel about a daemon's process and mount: the
// facts a restarted snapshotter decides by.

import (
	"damselfly/fusemount"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func writeState(path string, st daemonState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// maxStateBytes bounds daemon.json, read back after a restart.
const maxStateBytes = 64 << 10

func readState(path string) (daemonState, error) {
	var st daemonState
	f, err := os.Open(path)
	if err != nil {
		return st, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return st, err
	}
	if len(b) > maxStateBytes {
		return st, fmt.Errorf("%s: larger than %d bytes", path, maxStateBytes)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	if st.PID < 0 || !strings.HasPrefix(st.Image, "docker://") {
		return st, fmt.Errorf("%s: invalid pid %d or image %q", path, st.PID, st.Image)
	}
	return st, nil
}

// logTail returns what the daemon's log gained after offset, at most the
// last 2 KiB of it, on one line.
func logTail(path string, offset int64) string {
	const most = 2048
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() < offset {
		return "(no log)"
	}
	offset = max(offset, st.Size()-most)
	b, err := io.ReadAll(io.NewSectionReader(f, offset, most))
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty log)"
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// pidAlive reports whether pid is a process that has not exited (a
// zombie has: it only waits for its parent to reap it).
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

// ownsMount reports whether pid's command line names mountpoint: only
// then is it the daemon of that mount and not a process that reused its
// pid.
func ownsMount(pid int, mountpoint string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	for _, arg := range strings.Split(string(b), "\x00") {
		if arg == mountpoint {
			return true
		}
	}
	return false
}

// mounted reports whether dir is a mount point, or a dead FUSE mount
// (ENOTCONN).
func mounted(dir string) bool {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) {
		return true
	}
	ok, err := fusemount.IsMountpoint(dir)
	return err == nil && ok
}
