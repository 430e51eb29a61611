package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopTimeout is how long a process has to exit after SIGTERM before it is
// killed; a daemon that needs the kill is reported as a shutdown failure.
const stopTimeout = 20 * time.Second

// proc is one child process. Its stdout is kept line by line (for
// waitLine) and, with its stderr, written to a log file in the run's
// directory.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced when a line arrives

	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// startProc runs path with args. The child gets its own process group, so
// that a Ctrl-C on the terminal reaches only the harness, which then stops
// the children in order; and it gets SIGTERM if the harness dies first.
func startProc(logDir, name, path string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(logDir, name+".log"), more: make(chan struct{}), done: make(chan struct{})}
	lf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stderr = lf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
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
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitLine waits for a stdout line starting with prefix and returns the
// rest of it, trimmed.
func (p *proc) waitLine(prefix string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	seen := 0
	for {
		p.mu.Lock()
		lines, more := p.lines, p.more
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if rest, ok := strings.CutPrefix(lines[seen], prefix); ok {
				return strings.TrimSpace(rest), nil
			}
		}
		select {
		case <-more:
		case <-p.done:
			return "", fmt.Errorf("%s exited (%v) before printing %q; log %s:\n%s", p.name, p.err, prefix, p.log, p.logTail())
		case <-deadline:
			return "", fmt.Errorf("%s did not print %q within %s; log %s", p.name, prefix, timeout, p.log)
		}
	}
}

// logTail is the end of the process's log, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	const n = 3000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
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

// stop sends SIGTERM and waits for the exit, killing the process after
// stopTimeout (an error: a daemon must stop when asked). A process that
// had already exited on its own is no error here; stop is idempotent.
func (p *proc) stop() error {
	if p.exited() {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM", p.name, stopTimeout)
	}
}
