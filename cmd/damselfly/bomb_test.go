package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

// maxBombRSS bounds the peak resident memory of one damselfly run that
// refuses a bootstrap bomb: the binary's own baseline plus the few MiB
// refusing costs. The bombs inflate to gigabytes.
const maxBombRSS = 96 << 20

// rssWrapperEnv, set, makes the test binary runRSS's wrapper: it runs
// the command line it is given and writes the child's peak RSS in bytes
// to the file the variable names.
const rssWrapperEnv = "DAMSELFLY_TEST_RSS_FILE"

// runRSS runs the binary like run and also returns its peak resident
// memory in bytes. It runs it through a fresh copy of the test binary:
// Linux counts into a process's peak RSS that of the process it was
// started from (Go starts children with vfork), so a child of this
// test process, with its hundreds of MiB under -race, would report at
// least those; a child of a process that has just started reports its
// own.
func runRSS(t *testing.T, env []string, args ...string) (result, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	rssFile := filepath.Join(t.TempDir(), "rss")
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{binary}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(cmd.Environ(), append(env, rssWrapperEnv+"="+rssFile)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("damselfly %s: %v", strings.Join(args, " "), ctx.Err())
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		r.code = cmd.ProcessState.ExitCode()
	}
	data, err := os.ReadFile(rssFile)
	if err != nil {
		t.Fatalf("damselfly %s: no peak RSS: %v; stderr:\n%s", strings.Join(args, " "), err, r.stderr)
	}
	rss, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return r, rss
}

// rssWrapper runs os.Args[1:], passing its output and exit code on, and
// writes its peak RSS to the file rssWrapperEnv names.
func rssWrapper() int {
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, "rss wrapper:", err)
		return 125
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "rss wrapper: no rusage")
		return 125
	}
	if err := os.WriteFile(os.Getenv(rssWrapperEnv), []byte(strconv.FormatInt(ru.Maxrss<<10, 10)), 0o644); err != nil { // KiB on Linux
		fmt.Fprintln(os.Stderr, "rss wrapper:", err)
		return 125
	}
	return cmd.ProcessState.ExitCode()
}

// Every command that reads an image's bootstrap (inspect, check, unpack,
// convert --chunk-dict, mount) refuses each bootstrap bomb (a layer under
// 200 KiB that inflates to gigabytes or asks for them) with the error
// that names it, and its peak memory stays near the binary's own.
func TestCLIRefusesBootstrapBombs(t *testing.T) {
	t.Parallel()
	src := writeCorpus(t, "symlinks")
	bombs := filepath.Join(t.TempDir(), "bombs")
	if err := rafstest.WriteBombLayout(bombs); err != nil {
		t.Fatal(err)
	}
	for _, b := range rafstest.Bombs() {
		ref := "oci:" + bombs + ":" + b.Name
		for _, c := range []struct {
			name string
			args func(t *testing.T) []string
		}{
			{"inspect", func(*testing.T) []string { return []string{"inspect", ref} }},
			{"check", func(*testing.T) []string { return []string{"check", ref} }},
			{"unpack", func(t *testing.T) []string { return []string{"unpack", ref, filepath.Join(t.TempDir(), "rootfs")} }},
			{"convert", func(t *testing.T) []string {
				return []string{"convert", "--work-dir", t.TempDir(), "--chunk-dict", ref, "oci:" + src + ":symlinks", "oci:" + filepath.Join(t.TempDir(), "out") + ":x"}
			}},
			{"mount", func(t *testing.T) []string { return []string{"mount", ref, t.TempDir()} }},
		} {
			t.Run(b.Name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				env := []string{"DAMSELFLY_CACHE_DIR=" + t.TempDir()}
				start := time.Now()
				r, rss := runRSS(t, env, c.args(t)...)
				took := time.Since(start)
				if r.code == 0 || !strings.Contains(r.stderr, b.Want) {
					t.Errorf("got exit code %d, stderr %q; want non-zero and %q", r.code, r.stderr, b.Want)
				}
				if rss > maxBombRSS {
					t.Errorf("peak memory %d bytes, want at most %d", rss, maxBombRSS)
				}
				t.Logf("refused in %v with a peak of %d MiB", took, rss>>20)
			})
		}
	}
	// --max-bootstrap-bytes is the limit applied.
	r := run(t, nil, "inspect", "--max-bootstrap-bytes", "268435456", "oci:"+bombs+":declares-500m")
	if r.code == 0 || !strings.Contains(r.stderr, "the limit is 268435456") {
		t.Errorf("inspect --max-bootstrap-bytes 268435456: got exit code %d, stderr %q; want the limit named", r.code, r.stderr)
	}
}
