package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"damselfly/integration/harness"
)

// binary is the damselfly command, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	defer harness.RemoveBinary()
	var err error
	if binary, err = harness.Binary(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// proc is one process of the cluster, a harness.Proc whose failures fail
// the test. A failing test prints its log.
type proc struct {
	*harness.Proc
	t testing.TB
}

// start runs the damselfly binary with args. The process is stopped (and
// its log shown if the test failed) in t.Cleanup.
func start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	p, err := harness.Start(harness.ProcConfig{Name: name, LogDir: t.TempDir(), Path: binary, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopOrFail(t, p)
		showLog(t, p)
	})
	return &proc{Proc: p, t: t}
}

// stopOrFail stops p; a process that needs the kill fails the test.
func stopOrFail(t testing.TB, p *harness.Proc) {
	t.Helper()
	if err := p.Stop(); err != nil {
		t.Error(err)
	}
}

// showLog prints the end of p's log if the test failed.
func showLog(t testing.TB, p *harness.Proc) {
	if t.Failed() {
		t.Logf("--- log of %s:\n%s", p.Name(), p.LogTail(6000))
	}
}

// waitLine waits for a stdout line starting with prefix and returns the
// rest of it. It fails the test if the process exits or timeout passes.
func (p *proc) waitLine(prefix string, timeout time.Duration) string {
	p.t.Helper()
	rest, err := p.WaitLine(prefix, timeout)
	if err != nil {
		p.t.Fatal(err)
	}
	return rest
}

// logLine returns the first line of the process's log (stdout and
// stderr) that contains s, or "" if none does yet.
func (p *proc) logLine(s string) string {
	p.t.Helper()
	line, err := p.LogLine(s)
	if err != nil {
		p.t.Fatal(err)
	}
	return line
}

// stop sends SIGTERM and waits for the exit; a process that does not exit
// in harness.DefaultStopTimeout is killed and the test fails. It is
// idempotent.
func (p *proc) stop() {
	p.t.Helper()
	stopOrFail(p.t, p.Proc)
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() { p.Kill() }

// exited reports whether the process has exited.
func (p *proc) exited() bool { return p.Exited() }
