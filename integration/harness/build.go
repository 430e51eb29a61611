package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// MainPackage is the damselfly command's import path.
const MainPackage = "damselfly/cmd/damselfly"

// Build runs `go build -o dst pkg` in dir ("" is the current directory,
// which must be inside the module). Under `go test` the go command on
// PATH is the toolchain running the test.
func Build(ctx context.Context, dir, dst, pkg string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build %s: %w", pkg, err)
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", dst, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return nil
}

// built is the damselfly binary built once per process by Binary.
var built struct {
	sync.Mutex
	dir, path string
}

// Binary returns the damselfly command built from the tree, building it
// on the first call into a temporary directory that RemoveBinary
// deletes. Later calls return the same path; a failed build is tried
// again by the next call. It is safe for concurrent use.
func Binary(ctx context.Context) (string, error) {
	built.Lock()
	defer built.Unlock()
	if built.path != "" {
		return built.path, nil
	}
	dir, err := os.MkdirTemp("", "damselfly-bin-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "damselfly")
	if err := Build(ctx, "", path, MainPackage); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	built.dir, built.path = dir, path
	return path, nil
}

// RemoveBinary deletes what Binary built; a TestMain calls it after
// m.Run.
func RemoveBinary() {
	built.Lock()
	defer built.Unlock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	built.dir, built.path = "", ""
}

// BinaryOrBuild is the damselfly binary a benchmark runs: bin made
// absolute when it is set (another commit's build, for side-by-side
// runs), else ./cmd/damselfly of the module at dir built into dst, with
// logf told so.
func BinaryOrBuild(ctx context.Context, dir, bin, dst string, logf func(format string, args ...any)) (string, error) {
	if bin != "" {
		return filepath.Abs(bin)
	}
	logf("building %s", dst)
	if err := Build(ctx, dir, dst, "./cmd/damselfly"); err != nil {
		return "", err
	}
	return dst, nil
}
