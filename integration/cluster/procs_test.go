package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the damselfly command, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "damselfly-cluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "damselfly")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// go test puts its own toolchain first on PATH.
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, "damselfly/cmd/damselfly").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build damselfly: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// stopTimeout is how long a process has to exit after SIGTERM before it
// is killed (and the test fails: a daemon must stop when asked).
const stopTimeout = 20 * time.Second

// proc is one process of the cluster. Its stdout is kept line by line for
// waitLine; stdout and stderr both go to a log file that a failing test
// prints.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	log  string

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced when a line arrives

	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// start runs the damselfly binary with args. The process is stopped (and
// its log shown if the test failed) in t.Cleanup.
func start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, binary, args...)
}

func startCmd(t testing.TB, name, path string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, log: logPath, more: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stderr = lf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(lf, "stdout:", line)
			p.mu.Lock()
			p.lines = append(p.lines, line)
			close(p.more)
			p.more = make(chan struct{})
			p.mu.Unlock()
		}
		io.Copy(io.Discard, out)
	}()
	go func() {
		wg.Wait()
		p.err = p.cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- log of %s:\n%s", name, tail(string(b), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// waitLine waits for a stdout line starting with prefix and returns the
// rest of it. It fails the test if the process exits or timeout passes.
func (p *proc) waitLine(prefix string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.After(timeout)
	seen := 0
	for {
		p.mu.Lock()
		lines, more := p.lines, p.more
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if rest, ok := strings.CutPrefix(lines[seen], prefix); ok {
				return strings.TrimSpace(rest)
			}
		}
		select {
		case <-more:
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before printing %q", p.name, p.err, prefix)
		case <-deadline:
			p.t.Fatalf("%s did not print %q within %s", p.name, prefix, timeout)
		}
	}
}

// logLine returns the first line of the process's log (stdout and
// stderr) that contains s, or "" if none does yet.
func (p *proc) logLine(s string) string {
	p.t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		p.t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// stop sends SIGTERM and waits for the exit; a process that does not exit
// in stopTimeout is killed and the test fails. It is idempotent.
func (p *proc) stop() {
	p.t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("%s did not exit within %s of SIGTERM", p.name, stopTimeout)
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
