package fusemount

import (
	"fmt"
	"os/exec"
	"strings"
)

// fusermountUnmount asks fusermount3 (or fusermount) to unmount, for
// users who may not call umount(2) themselves.
func fusermountUnmount(mp string) error {
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "-u", mp).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s -u %s: %w: %s", bin, mp, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return fmt.Errorf("unmount %s: not permitted, and no fusermount3 found", mp)
}
