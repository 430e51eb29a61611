package rafstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoUmoci is returned by UmociUnpack when the umoci binary is not on PATH.
var ErrNoUmoci = errors.New("umoci not found on PATH (install the umoci package)")

// UmociUnpack unpacks the image tagged tag in the OCI layout at layoutDir
// into the new bundle directory dest with `umoci unpack`, and returns the
// bundle's root filesystem, dest/rootfs. dest must not exist. Run as root
// so that owners, device nodes and trusted.* xattrs are restored.
func UmociUnpack(ctx context.Context, layoutDir, tag, dest string) (rootfs string, err error) {
	bin, err := exec.LookPath("umoci")
	if err != nil {
		return "", fmt.Errorf("umoci unpack %s:%s: %w", layoutDir, tag, ErrNoUmoci)
	}
	cmd := exec.CommandContext(ctx, bin, "unpack", "--image", layoutDir+":"+tag, dest)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("umoci unpack %s:%s: %w: %s", layoutDir, tag, err, strings.TrimSpace(out.String()))
	}
	return filepath.Join(dest, "rootfs"), nil
}
