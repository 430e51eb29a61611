package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"damselfly/integration/bench"
	"damselfly/integration/bench/shaper"
)

var runSeq int

// mountRun drops the page cache, starts a mount daemon of bi through the
// shaper with cfg and the node cache in cacheDir, waits until the mount
// is ready, runs work (if any) on it and stops the daemon. Seconds is
// the time from the daemon's start to the end of work.
func (h *rig) mountRun(ctx context.Context, px *shaper.Proxy, bi *benchImage, cfg coldConfig, cacheDir string, work func(*daemon) error) (sample, error) {
	if err := dropCaches(); err != nil {
		return sample{}, err
	}
	runSeq++
	mp := filepath.Join(h.work, "mnt", bi.Name)
	logs := filepath.Join(h.work, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return sample{}, err
	}
	off := h.reg.logOffset()
	busy0 := machineBusy()
	mc := mountConfig{Shaper: px.Addr(), Repo: bi.Repo, CacheDir: cacheDir, AmplifyIO: cfg.AmplifyIO, PrefetchAll: cfg.PrefetchAll, KernelImage: cfg.KernelImage, Lazy: cfg.Lazy}
	tag := cfg.Tag
	if tag == "" {
		tag = "rafs"
	}
	d, err := startDaemon(h.bin, tag, mp, mc, filepath.Join(logs, fmt.Sprintf("%03d-%s.log", runSeq, bi.Name)))
	if err != nil {
		return sample{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			d.stop()
		}
	}()
	ready, err := d.waitReady(ctx, 2*time.Minute)
	if err != nil {
		return sample{}, err
	}
	s := sample{Ready: ready.Seconds()}
	s.RSS, _, _ = d.memory()
	if work != nil {
		if err := work(d); err != nil {
			return s, err
		}
	}
	s.Seconds = time.Since(d.started).Seconds()
	if busy0 > 0 {
		s.MachineCPU = machineBusy() - busy0
	}
	if u, sy, err := d.cpuSeconds(); err == nil {
		s.CPU = u + sy
	}
	_, s.HWM, _ = d.memory()
	if st, err := d.status(ctx); err == nil {
		for _, v := range st.Backend {
			s.Fetched += int64(v)
		}
	}
	stopped = true
	if err := d.stop(); err != nil {
		return s, err
	}
	q, err := h.reg.blobRequests(off)
	s.Requests = &q
	return s, err
}

// baselineRun pulls the plain image through the shaper with skopeo into
// an OCI layout and unpacks it with umoci, page cache dropped first;
// with python, it then runs the import in the unpacked tree.
func (h *rig) baselineRun(ctx context.Context, px *shaper.Proxy, bi *benchImage, python bool) (sample, error) {
	pull := filepath.Join(h.work, "pull", bi.Name)
	bundle := filepath.Join(h.work, "bundle", bi.Name)
	clean := func() error { return errors.Join(os.RemoveAll(pull), os.RemoveAll(bundle)) }
	if err := clean(); err != nil {
		return sample{}, err
	}
	defer clean()
	for _, d := range []string{filepath.Dir(pull), filepath.Dir(bundle)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return sample{}, err
		}
	}
	if err := dropCaches(); err != nil {
		return sample{}, err
	}
	off := h.reg.logOffset()
	t0 := time.Now()
	if _, err := runCmd(ctx, "skopeo", "copy", "--quiet", "--src-tls-verify=false",
		"docker://"+px.Addr()+"/"+bi.Repo+":plain", "oci:"+pull+":"+bi.tag); err != nil {
		return sample{}, err
	}
	t1 := time.Now()
	if _, err := runCmd(ctx, "umoci", "unpack", "--image", pull+":"+bi.tag, bundle); err != nil {
		return sample{}, err
	}
	t2 := time.Now()
	s := sample{Pull: t1.Sub(t0).Seconds(), Unpack: t2.Sub(t1).Seconds(), Seconds: t2.Sub(t0).Seconds()}
	if python {
		if err := bench.RunPython(ctx, filepath.Join(bundle, "rootfs")); err != nil {
			return s, err
		}
		s.Python = time.Since(t2).Seconds()
	}
	q, err := h.reg.blobRequests(off)
	s.Requests = &q
	return s, err
}

// measureFiles measures a many-files image: mount-ready time on every
// link, and on the first one the daemon's memory right after mounting
// and after `find MOUNT -type f` has walked every file.
func (h *rig) measureFiles(ctx context.Context, px *shaper.Proxy, p profile, bi *benchImage, first bool, res results) error {
	rss := first && h.o.rows["rss"]
	if !rss && !h.o.rows["ready"] {
		return nil
	}
	for r := range h.o.runs {
		cacheDir := h.cacheDir()
		var walk time.Duration
		var walkRSS int64
		var found int
		s, err := h.mountRun(ctx, px, bi, h.o.cold[0], cacheDir, func(d *daemon) error {
			if !rss {
				return nil
			}
			start := time.Now()
			n, err := countFiles(ctx, d.mp)
			walk, found = time.Since(start), n
			if err != nil {
				return err
			}
			walkRSS, _, err = d.memory()
			return err
		})
		os.RemoveAll(cacheDir)
		if err != nil {
			return fmt.Errorf("%s: %w", bi.Name, err)
		}
		res.add(p, bi, "ready", sample{Seconds: s.Ready})
		if rss {
			if found != bi.Convert.Stats.Files {
				return fmt.Errorf("%s: find saw %d files, the image has %d", bi.Name, found, bi.Convert.Stats.Files)
			}
			s.Seconds, s.Walk, s.WalkRSS, s.Found = s.Ready, walk.Seconds(), walkRSS, found
			res.add(p, bi, "rss", s)
			h.logf("%s %s run %d: ready %.2fs, RSS %s; find walked %d files in %.2fs, RSS %s (peak %s)", p.Name, bi.Name, r+1,
				s.Ready, mib(s.RSS), found, s.Walk, mib(walkRSS), mib(s.HWM))
		} else {
			h.logf("%s %s run %d: ready %.2fs", p.Name, bi.Name, r+1, s.Ready)
		}
	}
	return nil
}

// countFiles runs `find DIR -type f` and counts its lines.
func countFiles(ctx context.Context, dir string) (int, error) {
	out, err := runCmd(ctx, "find", dir, "-type", "f")
	return bytes.Count(out, []byte{'\n'}), err
}

// machineBusy is the CPU-seconds every core has spent busy since boot
// (/proc/stat: user, nice, system, irq, softirq, steal); 0 if unreadable.
func machineBusy() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0
		}
		busy += v
	}
	return busy / 100 // USER_HZ
}
