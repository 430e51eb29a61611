package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"damselfly/integration/bench/shaper"
)

// profile records the mount daemon with perf during one more cold read
// of every file of the first realistic image on the first link, then
// during a warm read on the cache that filled, and writes the hottest
// symbols of each to OUT/mount-perf.txt.
func (h *rig) profile(ctx context.Context, rep *report) error {
	if _, err := exec.LookPath("perf"); err != nil {
		rep.Notes = append(rep.Notes, "perf is not installed: no CPU profile of the daemon")
		return nil
	}
	var bi *benchImage
	for _, b := range h.images {
		if b.Kind != "files" {
			bi = b
			break
		}
	}
	if bi == nil {
		return nil
	}
	p := h.o.profiles[0]
	px, err := shaper.New(h.reg.host, p.Link)
	if err != nil {
		return err
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- px.Run(pctx) }()
	defer func() { stop(); <-done }()
	cacheDir := h.cacheDir()
	defer os.RemoveAll(cacheDir)
	var txt bytes.Buffer
	for _, phase := range []string{"cold", "warm"} {
		h.logf("profiling the mount daemon with perf during a %s read of %s at %s", phase, bi.Name, p.Name)
		data := filepath.Join(h.work, "perf-"+phase+".data")
		var read time.Duration
		s, err := h.mountRun(ctx, px, bi, h.o.cold[0], cacheDir, func(d *daemon) error {
			rec := exec.CommandContext(ctx, "perf", "record", "-F", "999", "-g", "-p", fmt.Sprint(d.Pid()), "-o", data)
			var out bytes.Buffer
			rec.Stdout, rec.Stderr = &out, &out
			if err := rec.Start(); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond) // perf attaches
			start := time.Now()
			err := h.readAll(ctx, d.mp, bi)
			read = time.Since(start)
			rec.Process.Signal(syscall.SIGINT)
			if werr := rec.Wait(); werr != nil && !interrupted(werr) && err == nil {
				err = fmt.Errorf("perf record: %w: %s", werr, lastLines(out.Bytes(), 5))
			}
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(&txt, "## %s read of every file of %s at %s (%s), mount daemon under perf record -g\n", phase, bi.Name, p.Name, p.Link)
		fmt.Fprintf(&txt, "read %.2fs; daemon CPU %.2fs over its %.2fs life (%.0f%% of one core); fetched %s in %d requests\n\n",
			read.Seconds(), s.CPU, s.Seconds, 100*s.CPU/s.Seconds, mib(s.Fetched), s.Requests.Count)
		for _, args := range [][]string{{"--no-children", "--sort", "dso,symbol"}, {"--children", "--sort", "symbol"}} {
			argv := append([]string{"perf", "report", "-i", data, "--stdio", "-g", "none", "--percent-limit", "1"}, args...)
			out, err := runCmd(ctx, argv...)
			if err != nil {
				return err
			}
			fmt.Fprintf(&txt, "$ perf report %v\n%s\n", args, dropComments(out))
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("perf, %s read of %s at %s: read %.2f s, daemon CPU %.1f s (%.0f%% of a core over its life)",
			phase, bi.Name, p.Name, read.Seconds(), s.CPU, 100*s.CPU/s.Seconds))
	}
	path := filepath.Join(h.out, "mount-perf.txt")
	rep.Notes = append(rep.Notes, "hottest symbols of both: "+h.rel(path))
	return os.WriteFile(path, txt.Bytes(), 0o644)
}

// interrupted reports whether err is the exit of a process that the
// SIGINT it was sent ended (perf record re-raises it after writing).
func interrupted(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}

// dropComments removes perf report's "#" header lines and blank runs.
func dropComments(out []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(out, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}
