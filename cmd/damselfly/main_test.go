package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

// binary is the damselfly command built once by TestMain; the tests run it
// as a user would.
var binary string

func TestMain(m *testing.M) {
	if os.Getenv(rssWrapperEnv) != "" {
		os.Exit(rssWrapper()) // the test binary run as runRSS's wrapper
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "damselfly-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "damselfly")
	// go test puts its own toolchain first on PATH.
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build damselfly: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// cliTimeout bounds one run of the binary.
const cliTimeout = 2 * time.Minute

// result is what one run of the binary gave.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the binary with args and env added to the test's environment,
// less any DAMSELFLY_* setting (so only env configures it).
func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DAMSELFLY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("damselfly %s: %v; stderr:\n%s", strings.Join(args, " "), ctx.Err(), r.stderr)
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run damselfly %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// mustRun runs the binary and fails t unless it exits 0.
func mustRun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r := run(t, env, args...)
	if r.code != 0 {
		t.Fatalf("damselfly %s: exit code %d, want 0; stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// testChunk is the chunk size of these tests: the smallest allowed, so the
// corpus files span several chunks while the layouts stay small.
const testChunk = 64 << 10

// writeCorpus writes the corpus image name into a new OCI layout and
// returns the layout's directory.
func writeCorpus(t *testing.T, name string) string {
	t.Helper()
	for _, img := range rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: testChunk}) {
		if img.Name == name {
			dir := filepath.Join(t.TempDir(), "oci")
			if err := rafstest.WriteOCILayout(t.Context(), dir, img); err != nil {
				t.Fatal(err)
			}
			return dir
		}
	}
	t.Fatalf("corpus has no image %q", name)
	return ""
}
