package harness

import (
	"bufio"
	"errors"
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

// DefaultStopTimeout is how long a process has after SIGTERM before Stop
// kills it (and reports that it had to).
const DefaultStopTimeout = 20 * time.Second

// ProcConfig says how to start a process.
type ProcConfig struct {
	// Name names the process in errors and its log file, LogDir/Name.log.
	Name   string
	LogDir string
	// Path is the program; Args its arguments; Env, if not nil, its whole
	// environment (nil inherits the harness's).
	Path string
	Args []string
	Env  []string
	// OwnGroup puts the child in its own process group, so that a Ctrl-C
	// on the terminal reaches only the harness (which then stops the
	// children in order), and has the kernel send it SIGTERM if the
	// harness dies first. Long runs (soak) want it; tests need not.
	OwnGroup bool
	// StopTimeout replaces DefaultStopTimeout.
	StopTimeout time.Duration
	// Netns, if set, is the network namespace (Host.Netns) to run the
	// process in. It is started through `nsenter --net`, which execs the
	// program in place: Pid is the program's own, for signals and CPU
	// accounting, and the mount namespace is the harness's.
	Netns string
}

// Proc is one child process. Its stdout is kept line by line, for
// WaitLine, and written with its stderr to the log file; stdout lines
// carry the prefix "stdout: " there. The process is always reaped: a
// goroutine waits for it from Start on.
type Proc struct {
	name    string
	log     string
	cmd     *exec.Cmd
	timeout time.Duration

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced when a line arrives

	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done
}

// Start starts the process described by cfg.
func Start(cfg ProcConfig) (*Proc, error) {
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	p := &Proc{name: cfg.Name, log: filepath.Join(cfg.LogDir, cfg.Name+".log"), timeout: cfg.StopTimeout,
		more: make(chan struct{}), done: make(chan struct{})}
	lf, err := os.Create(p.log)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	if cfg.Netns != "" {
		p.cmd = exec.Command("nsenter", nsenterArgs(cfg.Netns, cfg.Path, cfg.Args)...)
	} else {
		p.cmd = exec.Command(cfg.Path, cfg.Args...)
	}
	p.cmd.Env = cfg.Env
	p.cmd.Stderr = lf
	if cfg.OwnGroup {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
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
	})
	go func() {
		wg.Wait()
		p.err = p.cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// Log is the path of the process's log file.
func (p *Proc) Log() string { return p.log }

// Pid is the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Command is the command line, for reports.
func (p *Proc) Command() string { return strings.Join(p.cmd.Args, " ") }

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit status; it is valid once Done is closed.
func (p *Proc) Err() error { return p.err }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitLine waits for a stdout line starting with prefix and returns the
// rest of it, trimmed. It fails if the process exits first or timeout
// passes.
func (p *Proc) WaitLine(prefix string, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
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
			return "", fmt.Errorf("%s exited (%v) before printing %q; log %s:\n%s", p.name, p.err, prefix, p.log, p.LogTail(3000))
		case <-deadline.C:
			return "", fmt.Errorf("%s did not print %q within %s; log %s", p.name, prefix, timeout, p.log)
		}
	}
}

// LogLine returns the first line of the log (stdout and stderr) that
// contains s, trimmed, or "" if none does yet.
func (p *Proc) LogLine(s string) (string, error) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line), nil
		}
	}
	return "", nil
}

// LogTail is about the last n bytes of the log, for error messages.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.log)
	if len(b) > n {
		return "..." + string(b[len(b)-n:])
	}
	return string(b)
}

// ErrKilled reports that a process did not exit within its stop timeout
// of SIGTERM and was killed: a daemon must stop when asked.
var ErrKilled = errors.New("killed: no exit after SIGTERM")

// Stop sends SIGTERM and waits for the exit; a process that does not exit
// within its stop timeout is killed and Stop returns an error wrapping
// ErrKilled. A process that had already exited is no error here (see
// Err). Stop is idempotent and safe for concurrent use.
func (p *Proc) Stop() error {
	if p.Exited() {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %s of SIGTERM: %w", p.name, p.timeout, ErrKilled)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}
