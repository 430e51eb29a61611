package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/fusemount"
	"damselfly/integration/harness"
)

// mountConfig is what a measurement varies in the daemon's config file.
type mountConfig struct {
	Shaper      string // backend.host: the shaping proxy
	Repo        string
	CacheDir    string
	AmplifyIO   int
	PrefetchAll bool
	KernelImage bool
	Lazy        bool
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
kernel_image:
  enable: %t
  lazy: %t
advanced:
  amplify_io: %d
`, c.Shaper, c.Repo, c.CacheDir, c.PrefetchAll, c.KernelImage, c.Lazy, c.AmplifyIO)
}

// daemon is one `damselfly mount` child process.
type daemon struct {
	*harness.Proc
	mp      string
	started time.Time
}

// daemonStopTimeout is how long a daemon has to unmount and exit after
// SIGTERM.
const daemonStopTimeout = 30 * time.Second

// startDaemon writes the config next to logPath and starts
// `damselfly mount docker://SHAPER/REPO:TAG MP --config FILE`.
func startDaemon(bin, tag, mp string, cfg mountConfig, logPath string) (*daemon, error) {
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return nil, err
	}
	if harness.IsImageMount(mp) {
		return nil, fmt.Errorf("%s is still mounted", mp)
	}
	cfgPath := strings.TrimSuffix(logPath, ".log") + ".yaml"
	if err := os.WriteFile(cfgPath, []byte(cfg.yaml()), 0o644); err != nil {
		return nil, err
	}
	ref := "docker://" + cfg.Shaper + "/" + cfg.Repo + ":" + tag
	d := &daemon{mp: mp, started: time.Now()}
	p, err := harness.Start(harness.ProcConfig{Name: strings.TrimSuffix(filepath.Base(logPath), ".log"), LogDir: filepath.Dir(logPath),
		Path: bin, Args: []string{"mount", ref, mp, "--config", cfgPath}, StopTimeout: daemonStopTimeout})
	if err != nil {
		return nil, err
	}
	d.Proc = p
	return d, nil
}

// command is the daemon's command line, for the report.
func (d *daemon) command() string { return d.Command() }

// waitReady polls until the mountpoint is the daemon's mount (FUSE, or
// EROFS for a kernel image) that answers statfs and lists its root, and returns the time since the process
// started.
func (d *daemon) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		if harness.IsImageMount(d.mp) {
			if ents, err := os.ReadDir(d.mp); err == nil && len(ents) > 0 {
				return time.Since(d.started), nil
			}
		}
		select {
		case <-d.Done():
			return 0, fmt.Errorf("mount daemon exited before the mount was ready: %v: %s", d.Err(), d.logTail())
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
	return lastLines([]byte(d.LogTail(4096)), 5)
}

// stop sends SIGTERM (the daemon unmounts and exits) and waits; a daemon
// that does not exit within daemonStopTimeout is killed and its mount
// detached.
func (d *daemon) stop() error {
	if err := d.Stop(); err != nil {
		unix.Unmount(d.mp, unix.MNT_DETACH)
		return fmt.Errorf("mount daemon: %w", err)
	}
	if d.Err() != nil {
		return fmt.Errorf("mount daemon: %v: %s", d.Err(), d.logTail())
	}
	return nil
}

// memory reads VmRSS and VmHWM (bytes) from /proc/PID/status.
func (d *daemon) memory() (rss, hwm int64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.Pid()), "status"))
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
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.Pid()), "stat"))
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
