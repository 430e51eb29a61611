package rafstest

import (
	"os"
	"os/exec"
	"testing"
)

// SkipOrFail skips t for a missing prerequisite (a tool, root, /dev/fuse),
// or fails it when DAMSELFLY_TEST_DISALLOW_SKIP is set, as `make test` and
// so CI do: there every prerequisite is installed, and a skip would hide a
// test that did not run.
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("DAMSELFLY_TEST_DISALLOW_SKIP") != "" {
		t.Fatal(msg + " (skips are disallowed by DAMSELFLY_TEST_DISALLOW_SKIP)")
	}
	t.Skip(msg)
}

// RequireTool skips (or fails, see SkipOrFail) unless name is on PATH.
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		SkipOrFail(t, name+" is required (make test installs it with apt-get): "+err.Error())
	}
}

// RequireRoot skips (or fails, see SkipOrFail) unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "root is required (owners, device nodes, trusted.* xattrs, mounts)")
	}
}
