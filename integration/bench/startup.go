// Startup sets: the files an application start reads, for the
// benchmarks' startup rows. The Debian image's is what
// `python3 -c PythonImport` opens, found with strace in a tree of the
// image (an unpacked copy or a mount); the sample image's is its own
// rafs/sample.StartupSet.

package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"

	"damselfly/rafs/image"
	sampleimg "damselfly/rafs/sample"
)

// PythonImport is the application start of the Debian image.
const PythonImport = "import numpy, scipy"

// PythonEnv is the environment python runs with inside the image. The
// image is made with dpkg-deb -x, so maintainer scripts never ran and
// update-alternatives never made /usr/lib/x86_64-linux-gnu/libblas.so.3:
// LD_LIBRARY_PATH points the loader at OpenBLAS's copy instead.
var PythonEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
	"PYTHONDONTWRITEBYTECODE=1",
	"LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread",
}

// PythonCmd runs `python3 -c "import numpy, scipy"` chrooted in root.
func PythonCmd(ctx context.Context, root string, wrap ...string) *exec.Cmd {
	argv := append(wrap, "chroot", root, "/usr/bin/python3", "-c", PythonImport)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = PythonEnv
	return cmd
}

// RunPython runs the import chrooted in root and fails unless python
// exits 0.
func RunPython(ctx context.Context, root string) error {
	out, err := PythonCmd(ctx, root).CombinedOutput()
	if err != nil {
		return fmt.Errorf("python3 -c %q in %s: %w: %s", PythonImport, root, err, lastLines(out, 5))
	}
	return nil
}

// openedPath matches a successful open in strace's output.
var openedPath = regexp.MustCompile(`^\d+\s+open(?:at)?\((?:AT_FDCWD, )?"([^"]+)", ([A-Z_|]+)[^)]*\) = \d+`)

// PythonStartupSet runs the import under strace in the unpacked tree
// root and returns the regular files it opened, in first-open order, as
// symlink-free paths of img (so that reading them on a mount never
// follows an absolute link out of it).
func PythonStartupSet(ctx context.Context, root string, img *image.Image) ([]string, error) {
	trace := root + ".strace"
	defer os.Remove(trace)
	cmd := PythonCmd(ctx, root, "strace", "-f", "-qq", "-e", "trace=open,openat,execve", "-e", "status=successful", "-o", trace)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("strace python3: %w: %s", err, lastLines(out, 5))
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		return nil, err
	}
	fsys := img.FS(ctx)
	seen := map[string]bool{}
	var out []string
	inside := false // past chroot's own opens, once python3 was exec'd
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `execve("/usr/bin/python3"`) {
			inside = true
			continue
		}
		m := openedPath.FindStringSubmatch(line)
		if !inside || m == nil || strings.Contains(m[2], "O_DIRECTORY") || !strings.HasPrefix(m[1], "/") {
			continue
		}
		p, err := resolveLinks(fsys, strings.TrimPrefix(m[1], "/"))
		if err != nil || seen[p] {
			continue // /dev, /proc and such are not in the image
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("strace saw python3 open no file of the image")
	}
	return out, nil
}

// linkFS is what resolveLinks needs of rafs.FS.
type linkFS interface {
	Lstat(name string) (fs.FileInfo, error)
	ReadLink(name string) (string, error)
}

// resolveLinks follows the symlinks in p inside fsys (absolute targets are
// relative to the image root) and returns the path of the regular file
// it names.
func resolveLinks(fsys linkFS, p string) (string, error) {
	parts := strings.Split(p, "/")
	cur := ""
	for hops := 0; len(parts) > 0; {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			if cur == "." {
				cur = ""
			}
			continue
		}
		next := path.Join(cur, name)
		fi, err := fsys.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many symlinks", p)
		}
		target, err := fsys.ReadLink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = ""
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	fi, err := fsys.Lstat(cur)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", p)
	}
	return cur, nil
}

// SampleStartupSet is the sample image's own startup set (entry points
// and configuration, about 5% of its files), for the image that
// SampleLayout wrote at scale.
func SampleStartupSet(scale float64) []string {
	return sampleimg.StartupSet(sampleimg.Generate("sample", sampleimg.Options{Seed: 1, Scale: scale}))
}
