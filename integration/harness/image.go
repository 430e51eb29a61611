package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/sample"
	"damselfly/rafs/transport"
)

// Unpacked is a generated image written as an OCI layout, with umoci's
// unpacking of it: the reference every read is compared with.
type Unpacked struct {
	Layout string // the OCI layout directory
	Tag    string // the image's tag in it
	Root   string // umoci's rootfs
}

// Ref is the image's reference in its layout, "oci:DIR:TAG".
func (u Unpacked) Ref() string { return "oci:" + u.Layout + ":" + u.Tag }

// Unpack writes img into dir/oci, tagged img.Name, and unpacks it with
// umoci into dir/umoci (which needs root and umoci on PATH).
func Unpack(ctx context.Context, dir string, img sample.Image) (Unpacked, error) {
	u := Unpacked{Layout: filepath.Join(dir, "oci"), Tag: img.Name}
	if err := sample.WriteOCILayout(ctx, u.Layout, img); err != nil {
		return Unpacked{}, err
	}
	root, err := rafstest.UmociUnpack(ctx, u.Layout, u.Tag, filepath.Join(dir, "umoci"))
	if err != nil {
		return Unpacked{}, err
	}
	u.Root = root
	return u, nil
}

// Copy copies the image at src to dst, both transport references
// ("oci:DIR:TAG", "docker://HOST/REPO:TAG"), in process, blobs as they
// are.
func Copy(ctx context.Context, src, dst string) error {
	r, err := transport.Parse(src, transport.Options{})
	if err != nil {
		return err
	}
	img, err := transport.ReadImage(ctx, r, transport.Options{})
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	w, err := transport.Parse(dst, transport.Options{})
	if err != nil {
		return err
	}
	if err := transport.WriteImage(ctx, w, img, transport.Options{}); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}

// Convert runs `BINARY convert SRC DST --json EXTRA...`, the tool users
// run, outside the harness's process (which may be built with the race
// detector), and returns what it reports.
func Convert(ctx context.Context, binary, src, dst string, extra ...string) (*convert.Result, error) {
	argv := append([]string{"convert", src, dst, "--json"}, extra...)
	cmd := exec.CommandContext(ctx, binary, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("damselfly %s: %w: %s", strings.Join(argv, " "), err, lastLines(append(stdout.Bytes(), stderr.Bytes()...), 5))
	}
	var res convert.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("damselfly convert --json output: %w", err)
	}
	return &res, nil
}

// lastLines is the last n lines of b, for error messages.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
