package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"damselfly/integration/bench"
	"damselfly/integration/bench/shaper"
)

// sample is one measurement. Seconds is the figure the row is about; the
// rest explains it.
type sample struct {
	Seconds float64 `json:"seconds"`
	// Mount runs: from the daemon's start.
	Ready    float64   `json:"ready_seconds,omitempty"`
	Bytes    int64     `json:"bytes_read,omitempty"`
	Fetched  int64     `json:"fetched_bytes,omitempty"` // stored bytes the daemon fetched
	Requests *Requests `json:"blob_requests,omitempty"` // as the registry logged them
	CPU      float64   `json:"daemon_cpu_seconds,omitempty"`
	// MachineCPU is every CPU-second the machine spent from the daemon's
	// start to the end of the work (/proc/stat): the readers', the
	// kernel's and its workers' (a loop device's) included.
	MachineCPU float64 `json:"machine_cpu_seconds,omitempty"`
	RSS        int64   `json:"rss_bytes,omitempty"` // VmRSS when the mount was ready
	HWM        int64   `json:"hwm_bytes,omitempty"` // VmHWM at the end
	// After a metadata walk of every file (files images).
	Walk    float64 `json:"walk_seconds,omitempty"`
	WalkRSS int64   `json:"walk_rss_bytes,omitempty"`
	Found   int     `json:"files_found,omitempty"`
	// Baseline runs.
	Pull   float64 `json:"pull_seconds,omitempty"`
	Unpack float64 `json:"unpack_seconds,omitempty"`
	Python float64 `json:"python_seconds,omitempty"`
}

// results are the samples of every series, keyed "profile/image/what".
type results map[string][]sample

func (r results) add(p profile, bi *benchImage, what string, s sample) {
	k := p.Name + "/" + bi.Name + "/" + what
	r[k] = append(r[k], s)
}

func (r results) get(p profile, bi *benchImage, what string) []sample {
	return r[p.Name+"/"+bi.Name+"/"+what]
}

// measure runs every selected measurement on every profile.
func (h *rig) measure(ctx context.Context) (*report, error) {
	res := results{}
	rep := &report{Started: time.Now().UTC().Format(time.RFC3339), Environment: h.env, Options: h.optionsSummary()}
	for pi, p := range h.o.profiles {
		px, err := shaper.New(h.reg.host, p.Link)
		if err != nil {
			return nil, err
		}
		pctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- px.Run(pctx) }()
		h.logf("profile %s: %s through the shaper on %s", p.Name, p.Link, px.Addr())
		for _, bi := range h.images {
			if bi.Kind == "files" {
				err = h.measureFiles(ctx, px, p, bi, pi == 0, res)
			} else {
				err = h.measureImage(ctx, px, p, bi, res)
			}
			if err != nil {
				break
			}
		}
		stop()
		if rerr := <-done; err == nil {
			err = rerr
		}
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.Name, err)
		}
		st := px.Stats()
		h.logf("profile %s: the shaper carried %s down, %s up in %d connections", p.Name, mib(st.DownBytes), mib(st.UpBytes), st.Conns)
	}
	if h.o.perf {
		if err := h.profile(ctx, rep); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			h.logf("perf profile failed: %v", err)
			rep.Notes = append(rep.Notes, "perf profile failed: "+err.Error())
		}
	}
	rep.Images = h.images
	rep.Results = res
	rep.Rows = h.rows(res)
	return rep, nil
}

// measureImage measures one realistic image on one link: the baseline
// and the mount side alternate which goes first from run to run.
func (h *rig) measureImage(ctx context.Context, px *shaper.Proxy, p profile, bi *benchImage, res results) error {
	rows := h.o.rows
	python := rows["python"] && bi.Kind == "debian"
	needBaseline := rows["ready"] || rows["startup"] || rows["cold"] || python
	for r := range h.o.runs {
		baseline := func() error {
			if !needBaseline {
				return nil
			}
			s, err := h.baselineRun(ctx, px, bi, python)
			if err != nil {
				return fmt.Errorf("pull and unpack: %w", err)
			}
			res.add(p, bi, "baseline", s)
			h.logf("%s %s run %d: pull %.2fs + unpack %.2fs = %.2fs", p.Name, bi.Name, r+1, s.Pull, s.Unpack, s.Seconds)
			return nil
		}
		if r%2 == 0 {
			if err := baseline(); err != nil {
				return err
			}
		}
		if err := h.mountSide(ctx, px, p, bi, r, res); err != nil {
			return err
		}
		if r%2 == 1 {
			if err := baseline(); err != nil {
				return err
			}
		}
	}
	return nil
}

// mountSide is one run of every selected mount measurement.
func (h *rig) mountSide(ctx context.Context, px *shaper.Proxy, p profile, bi *benchImage, r int, res results) error {
	rows := h.o.rows
	cfgs := h.o.cold
	if !rows["cold"] {
		cfgs = cfgs[:0]
		if rows["warm"] || rows["ready"] {
			cfgs = h.o.cold[:1] // fills the cache for the warm read
		}
	}
	var warmCache string
	defer func() {
		if warmCache != "" {
			os.RemoveAll(warmCache)
		}
	}()
	for ci, cfg := range cfgs {
		cacheDir := h.cacheDir()
		s, err := h.mountRun(ctx, px, bi, cfg, cacheDir, func(d *daemon) error {
			return h.readAll(ctx, d.mp, bi)
		})
		if ci == 0 && rows["warm"] {
			warmCache = cacheDir
		} else {
			os.RemoveAll(cacheDir)
		}
		if err != nil {
			return fmt.Errorf("cold read (%s): %w", cfg.Name, err)
		}
		res.add(p, bi, "cold/"+cfg.Name, s)
		res.add(p, bi, "ready", sample{Seconds: s.Ready})
		h.logf("%s %s run %d: cold read (%s): ready %.2fs, all %d files %.2fs; fetched %s in %d requests (median %s, registry sent %s); daemon CPU %.1fs, machine CPU %.1fs",
			p.Name, bi.Name, r+1, cfg.Name, s.Ready, bi.Files, s.Seconds, mib(s.Fetched), s.Requests.Count, mib(s.Requests.Median), mib(s.Requests.Bytes), s.CPU, s.MachineCPU)
	}
	if rows["startup"] {
		for _, key := range []string{"startup", "startup-trace"} {
			cfg := h.o.cold[0]
			if key == "startup-trace" {
				cfg.Tag = "rafs-startup"
			}
			cacheDir := h.cacheDir()
			s, err := h.mountRun(ctx, px, bi, cfg, cacheDir, func(d *daemon) error {
				n, err := readFiles(ctx, d.mp, bi.Startup, 1)
				if err == nil && n != bi.StartupBytes {
					err = fmt.Errorf("read %d bytes of the startup set, want %d", n, bi.StartupBytes)
				}
				return err
			})
			os.RemoveAll(cacheDir)
			if err != nil {
				return fmt.Errorf("%s read: %w", key, err)
			}
			res.add(p, bi, key, s)
			res.add(p, bi, "ready", sample{Seconds: s.Ready})
			h.logf("%s %s run %d: %s read of %d files: %.2fs (ready %.2fs, fetched %s)", p.Name, bi.Name, r+1, key, len(bi.Startup), s.Seconds, s.Ready, mib(s.Fetched))
		}
	}
	if rows["python"] && bi.Kind == "debian" {
		cacheDir := h.cacheDir()
		s, err := h.mountRun(ctx, px, bi, h.o.cold[0], cacheDir, func(d *daemon) error { return bench.RunPython(ctx, d.mp) })
		os.RemoveAll(cacheDir)
		if err != nil {
			return fmt.Errorf("python on the mount: %w", err)
		}
		res.add(p, bi, "python", s)
		res.add(p, bi, "ready", sample{Seconds: s.Ready})
		h.logf("%s %s run %d: python3 -c %q on the mount: %.2fs (ready %.2fs, fetched %s)", p.Name, bi.Name, r+1, bench.PythonImport, s.Seconds, s.Ready, mib(s.Fetched))
	}
	if rows["warm"] {
		return h.warmAndNative(ctx, px, p, bi, r, warmCache, res)
	}
	return nil
}

// warmAndNative reads every file from a mount whose node cache is full
// and from the unpacked tree on local disk, page cache dropped before
// each, alternating which goes first.
func (h *rig) warmAndNative(ctx context.Context, px *shaper.Proxy, p profile, bi *benchImage, r int, cacheDir string, res results) error {
	if h.o.cold[0].KernelImage {
		// A mount on the full node cache writes the kernel image (the
		// cold read's daemon stopped before its next check for a whole
		// image): timed on its own, so that the warm read below starts
		// with the image on disk and the page cache dropped.
		s, err := h.mountRun(ctx, px, bi, h.o.cold[0], cacheDir, nil)
		if err != nil {
			return fmt.Errorf("kernel image: %w", err)
		}
		res.add(p, bi, "kernel-image", s)
		h.logf("%s %s run %d: kernel image written by a mount on the full cache: ready %.2fs, daemon CPU %.1fs", p.Name, bi.Name, r+1, s.Ready, s.CPU)
	}
	warm := func() error {
		var read time.Duration
		s, err := h.mountRun(ctx, px, bi, h.o.cold[0], cacheDir, func(d *daemon) error {
			start := time.Now()
			err := h.readAll(ctx, d.mp, bi)
			read = time.Since(start)
			return err
		})
		if err != nil {
			return fmt.Errorf("warm read: %w", err)
		}
		s.Seconds = read.Seconds()
		res.add(p, bi, "warm", s)
		h.logf("%s %s run %d: warm read %.2fs (%.0f MB/s), ready %.2fs, fetched %s, daemon CPU %.1fs", p.Name, bi.Name, r+1, s.Seconds, float64(bi.Bytes)/1e6/s.Seconds, s.Ready, mib(s.Fetched), s.CPU)
		return nil
	}
	native := func() error {
		if err := dropCaches(); err != nil {
			return err
		}
		start := time.Now()
		n, err := readFiles(ctx, bi.native, bi.list.Paths, h.o.workers)
		if err != nil {
			return fmt.Errorf("local read: %w", err)
		}
		s := sample{Seconds: time.Since(start).Seconds(), Bytes: n}
		res.add(p, bi, "native", s)
		h.logf("%s %s run %d: local disk read %.2fs (%.0f MB/s)", p.Name, bi.Name, r+1, s.Seconds, float64(n)/1e6/s.Seconds)
		return nil
	}
	order := []func() error{warm, native}
	if r%2 == 1 {
		order[0], order[1] = native, warm
	}
	for _, f := range order {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// readAll reads every file of bi under root and checks the byte count.
func (h *rig) readAll(ctx context.Context, root string, bi *benchImage) error {
	n, err := readFiles(ctx, root, bi.list.Paths, h.o.workers)
	if err == nil && n != bi.Bytes {
		err = fmt.Errorf("read %d bytes, the image has %d", n, bi.Bytes)
	}
	return err
}

var cacheSeq int

// cacheDir is a new, empty node cache directory.
func (h *rig) cacheDir() string {
	cacheSeq++
	return filepath.Join(h.work, "cache", fmt.Sprint(cacheSeq))
}
