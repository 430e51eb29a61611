package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/fusemount"
)

// fuseSuperMagic is statfs's f_type of a FUSE mount.
const fuseSuperMagic = 0x65735546

// mountConfig is what a measurement varies in the daemon's config file.
type mountConfig struct {
	Shaper      string // backend.host: the shaping proxy
	Repo        string
	CacheDir    string
	AmplifyIO   int
	PrefetchAll bool
}

// yaml renders the --config file: nydusd-shaped keys of fusemount.Config.
func (c mountConfig) yaml() string {
	return fmt.Sprintf(`backend:
  type: registry
  scheme: http
  host: %q
  repo: %q
cache:
  dir: %q
prefetch:
  enable: true
  prefetch_all: %t
advanced:
  amplify_io: %d
`, c.Shaper, c.Repo, c.CacheDir, c.PrefetchAll, c.AmplifyIO)
}

// daemon is one `damselfly mount` child process.
type daemon struct {
	cmd     *exec.Cmd
	mp      string
	started time.Time
	exited  chan struct{}
	waitErr error
	logPath string
}

// startDaemon writes the config next to logPath and starts
// `damselfly mount docker://SHAPER/REPO:TAG MP --config FILE`.
func startDaemon(bin, tag, mp string, cfg mountConfig, logPath string) (*daemon, error) {
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mp, &st); err == nil && st.Type == fuseSuperMagic {
		return nil, fmt.Errorf("%s is still a FUSE mount", mp)
	}
	cfgPath := strings.TrimSuffix(logPath, ".log") + ".yaml"
	if err := os.WriteFile(cfgPath, []byte(cfg.yaml()), 0o644); err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	ref := "docker://" + cfg.Shaper + "/" + cfg.Repo + ":" + tag
	cmd := exec.Command(bin, "mount", ref, mp, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = lf, lf
	d := &daemon{cmd: cmd, mp: mp, exited: make(chan struct{}), logPath: logPath}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.waitErr = cmd.Wait(); close(d.exited) }()
	return d, nil
}

// command is the daemon's command line, for the report.
func (d *daemon) command() string { return strings.Join(d.cmd.Args, " ") }

// waitReady polls until the mountpoint is a FUSE mount that answers
// statfs and lists its root, and returns the time since the process
// started.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		var st unix.Statfs_t
		if unix.Statfs(d.mp, &st) == nil && st.Type == fuseSuperMagic {
			if ents, err := os.ReadDir(d.mp); err == nil && len(ents) > 0 {
				return time.Since(d.started), nil
			}
		}
		select {
		case <-d.exited:
			return 0, fmt.Errorf("mount daemon exited before the mount was ready: %v: %s", d.waitErr, d.logTail())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("mount not ready after %s: %s", timeout, d.logTail())
		}
	}
}

func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	return lastLines(b, 5)
}

// stop sends SIGTERM (the daemon unmounts and exits) and waits; a daemon
// that does not exit within 30s is killed and its mount detached.
func (d *daemon) stop() error {
	select {
	case <-d.exited:
		return d.exitError()
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return d.exitError()
	case <-time.After(30 * time.Second):
	}
	d.cmd.Process.Kill()
	<-d.exited
	unix.Unmount(d.mp, unix.MNT_DETACH)
	return fmt.Errorf("mount daemon did not exit within 30s of SIGTERM; killed it")
}

func (d *daemon) exitError() error {
	if d.waitErr != nil {
		return fmt.Errorf("mount daemon: %v: %s", d.waitErr, d.logTail())
	}
	return nil
}

// memory reads VmRSS and VmHWM (bytes) from /proc/PID/status.
func (d *daemon) memory() (rss, hwm int64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "status"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS in /proc/PID/status")
	}
	return rss, hwm, nil
}

// cpuSeconds is the daemon's user and system CPU time so far, from
// /proc/PID/stat (clock ticks of 1/100 s).
func (d *daemon) cpuSeconds() (user, sys float64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, 0, errors.New("short /proc/PID/stat")
	}
	// Fields 14 and 15 of stat; f[0] is field 3.
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return ut / 100, st / 100, nil
}

// status asks the daemon's control socket for its counters.
func (d *daemon) status(ctx context.Context) (*fusemount.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return fusemount.QueryStatus(ctx, d.mp, "")
}
