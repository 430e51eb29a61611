package fusemount

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// kernelReadaheadKB is the kernel readahead the daemon asks for on its
// mount: whole 1 MiB requests (max_read) for a file read sequentially.
// The FUSE INIT handshake cannot raise readahead above the 128 KiB the
// kernel offers, so a big file came in eight READ round trips per MiB,
// each a reply written on its own; the chunks are decoded whole anyway,
// so reading ahead further costs the daemon no fetch it would not make.
const kernelReadaheadKB = 1024

// raiseReadahead sets the readahead of the mount at mp (its backing
// device info, /sys/class/bdi/MAJOR:MINOR/read_ahead_kb) to kb, never
// lowering it. It finds the device in /proc/self/mountinfo rather than
// by stat, so that the daemon sends no request to its own mount.
func raiseReadahead(mp string, kb int) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	dev, err := mountDevice(f, mp)
	if err != nil {
		return err
	}
	path := "/sys/class/bdi/" + dev + "/read_ahead_kb"
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cur int
	if _, err := fmt.Sscan(string(old), &cur); err == nil && cur >= kb {
		return nil
	}
	return os.WriteFile(path, []byte(fmt.Sprintf("%d\n", kb)), 0o644)
}

// mountDevice returns the MAJOR:MINOR of the last mount at mp listed in
// r, in /proc/PID/mountinfo's format.
func mountDevice(r io.Reader, mp string) (string, error) {
	mp = filepath.Clean(mp)
	dev := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJOR:MINOR ROOT MOUNTPOINT ...; octal escapes
		// (\040 for a space) in the paths.
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && unescapeMountinfo(f[4]) == mp {
			dev = f[2]
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if dev == "" {
		return "", fmt.Errorf("%s is not in mountinfo", mp)
	}
	return dev, nil
}
