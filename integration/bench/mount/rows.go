package main

import (
	"fmt"

	"damselfly/integration/bench"
)

// Targets of the "fusemount" issue.
const (
	TargetReady    = 1.0 / 20 // mount-ready / (pull + unpack)
	TargetStartup  = 0.15     // startup read / (pull + unpack)
	TargetCold     = 1.0      // cold read of every file / (pull + unpack)
	TargetWarm     = 0.7      // warm read throughput / local disk
	TargetRSSMiB   = 64       // daemon RSS with 200k files mounted
	targetRSSFiles = 200_000  // the image size the RSS target is set for
)

func met(b bool) *bool { return &b }

// rows turns the samples into the table.
func (h *rig) rows(res results) []bench.Row {
	var rows []bench.Row
	for pi, p := range h.o.profiles {
		var smallest float64
		for _, bi := range h.images {
			if bi.Kind == "files" {
				rows = append(rows, h.filesRows(res, p, pi == 0, bi, &smallest)...)
			} else {
				rows = append(rows, h.imageRows(res, p, bi)...)
			}
		}
	}
	return rows
}

// repro is the harness command that measures one row again.
func (h *rig) repro(p profile, bi *benchImage, row string, extra string) string {
	imgs := bi.Kind
	s := fmt.Sprintf("go run ./integration/bench/mount -images %s -profiles %s -rows %s -runs %d", imgs, p.Name, row, h.o.runs)
	if bi.Kind == "files" {
		s += fmt.Sprintf(" -files %d", bi.Convert.Stats.Files)
	}
	if extra != "" {
		s += " " + extra
	}
	return s
}

func (h *rig) imageRows(res results, p profile, bi *benchImage) []bench.Row {
	var rows []bench.Row
	base := res.get(p, bi, "baseline")
	if len(base) == 0 {
		return h.warmRows(res, p, bi)
	}
	baseSec := med(base, func(s sample) float64 { return s.Seconds })
	baseText := fmt.Sprintf("%.2f s (pull %.2f s + unpack %.2f s)", baseSec,
		med(base, func(s sample) float64 { return s.Pull }), med(base, func(s sample) float64 { return s.Unpack }))
	name := fmt.Sprintf("%s @ %s", bi.Name, p.Name)
	mountCmd := fmt.Sprintf("damselfly mount docker://PROXY/%s:rafs MNT --config C", bi.Repo)
	baseCmd := fmt.Sprintf("skopeo copy docker://PROXY/%s:plain oci:D:%s && umoci unpack --image D:%s B", bi.Repo, bi.tag, bi.tag)
	timeRow := func(what, key string, target float64, targetText string, ss []sample, text string, cmd string) bench.Row {
		d := med(ss, func(s sample) float64 { return s.Seconds })
		r := bench.Row{What: name + ": " + what, Unit: "s", Damselfly: d, Baseline: baseSec, BaselineName: "pull + unpack",
			BaselineText: baseText, Ratio: d / baseSec, Target: targetText, Runs: len(ss), Command: cmd, DamselflyText: text}
		if target > 0 {
			r.Met = met(d/baseSec <= target)
		}
		return r
	}
	if ss := res.get(p, bi, "ready"); len(ss) > 0 && h.o.rows["ready"] {
		rows = append(rows, timeRow("time to mount-ready", "ready", TargetReady, "≤ 0.05x (1/20)", ss, "",
			h.repro(p, bi, "ready", "")+" ; "+mountCmd+" ; "+baseCmd))
	}
	if ss := res.get(p, bi, "startup"); len(ss) > 0 {
		text := fmt.Sprintf("%.2f s (ready %.2f s; fetched %s)", med(ss, func(s sample) float64 { return s.Seconds }),
			med(ss, func(s sample) float64 { return s.Ready }), mib(int64(med(ss, func(s sample) float64 { return float64(s.Fetched) }))))
		rows = append(rows, timeRow(fmt.Sprintf("startup read (%d files, %s, one by one) from daemon start", len(bi.Startup), mib(bi.StartupBytes)),
			"startup", TargetStartup, "≤ 0.15x", ss, text, h.repro(p, bi, "startup", "")+" ; "+mountCmd+" ; "+baseCmd))
	}
	if ss := res.get(p, bi, "startup-trace"); len(ss) > 0 && bi.ConvertStartup != nil {
		text := fmt.Sprintf("%.2f s (ready %.2f s; fetched %s; %d chunks in the prefetch blob)", med(ss, func(s sample) float64 { return s.Seconds }),
			med(ss, func(s sample) float64 { return s.Ready }), mib(int64(med(ss, func(s sample) float64 { return float64(s.Fetched) }))),
			bi.ConvertStartup.Stats.PrefetchChunks)
		cmd := fmt.Sprintf("%s ; damselfly convert oci:LAYOUT docker://PROXY/%s:rafs-startup --prefetch-patterns STARTUP-SET ; damselfly mount docker://PROXY/%s:rafs-startup MNT --config C ; %s",
			h.repro(p, bi, "startup", ""), bi.Repo, bi.Repo, baseCmd)
		rows = append(rows, timeRow(fmt.Sprintf("startup read (%d files, %s, one by one) from daemon start, image converted with the startup set as --prefetch-patterns", len(bi.Startup), mib(bi.StartupBytes)),
			"startup-trace", TargetStartup, "≤ 0.15x", ss, text, cmd))
	}
	if ss := res.get(p, bi, "python"); len(ss) > 0 {
		d := med(ss, func(s sample) float64 { return s.Seconds })
		bp := med(base, func(s sample) float64 { return s.Seconds + s.Python })
		rows = append(rows, bench.Row{What: name + fmt.Sprintf(": `python3 -c %q` chrooted in the mount, from daemon start", bench.PythonImport), Unit: "s",
			Damselfly: d, Baseline: bp, Ratio: d / bp, Runs: len(ss), Target: "report (startup target is ≤ 0.15x)",
			DamselflyText: fmt.Sprintf("%.2f s (ready %.2f s; fetched %s)", d, med(ss, func(s sample) float64 { return s.Ready }),
				mib(int64(med(ss, func(s sample) float64 { return float64(s.Fetched) })))),
			BaselineText: fmt.Sprintf("%.2f s (pull + unpack, then python3 %.2f s)", bp, med(base, func(s sample) float64 { return s.Python })),
			Command:      h.repro(p, bi, "python", "") + " ; chroot MNT /usr/bin/python3 -c '" + bench.PythonImport + "'"})
	}
	for ci, cfg := range h.o.cold {
		ss := res.get(p, bi, "cold/"+cfg.Name)
		if len(ss) == 0 || !h.o.rows["cold"] {
			continue
		}
		d := med(ss, func(s sample) float64 { return s.Seconds })
		cpu := med(ss, func(s sample) float64 { return s.CPU })
		text := fmt.Sprintf("%.2f s (ready %.2f s; fetched %s of %s blobs in %.0f requests, median %s; daemon CPU %.1f s = %.0f%% of a core)", d,
			med(ss, func(s sample) float64 { return s.Ready }),
			mib(int64(med(ss, func(s sample) float64 { return float64(s.Fetched) }))), mib(bi.Convert.NewBlobBytes),
			med(ss, func(s sample) float64 { return float64(s.Requests.Count) }),
			mib(int64(med(ss, func(s sample) float64 { return float64(s.Requests.Median) }))), cpu, 100*cpu/d)
		what := fmt.Sprintf("cold read of all %d files (%s), %s", bi.Files, mib(bi.Bytes), cfg.Name)
		if ci == 0 {
			what += " (default)"
		}
		extra := fmt.Sprintf("-cold-configs %s", coldFlag(cfg))
		rows = append(rows, timeRow(what, "cold", TargetCold, "≤ 1.0x", ss, text, h.repro(p, bi, "cold", extra)+" ; "+mountCmd+" ; "+baseCmd))
	}
	return append(rows, h.warmRows(res, p, bi)...)
}

func coldFlag(c coldConfig) string {
	s := fmt.Sprintf("%dm", c.AmplifyIO>>20)
	if c.PrefetchAll {
		s += "+all"
	}
	return s
}

func (h *rig) warmRows(res results, p profile, bi *benchImage) []bench.Row {
	warm, native := res.get(p, bi, "warm"), res.get(p, bi, "native")
	if len(warm) == 0 || len(native) == 0 {
		return nil
	}
	mb := float64(bi.Bytes) / 1e6
	w := mb / med(warm, func(s sample) float64 { return s.Seconds })
	n := mb / med(native, func(s sample) float64 { return s.Seconds })
	return []bench.Row{{What: fmt.Sprintf("%s @ %s: warm read of all %d files (node cache full, page cache dropped), read phase only", bi.Name, p.Name, bi.Files),
		Unit: "MB/s", Damselfly: w, Baseline: n, BaselineName: "local disk, umoci-unpacked tree",
		DamselflyText: fmt.Sprintf("%.0f MB/s (%.2f s; fetched %s; daemon CPU %.1f s over the whole run)", w, med(warm, func(s sample) float64 { return s.Seconds }),
			mib(int64(med(warm, func(s sample) float64 { return float64(s.Fetched) }))), med(warm, func(s sample) float64 { return s.CPU })),
		Ratio: w / n, Target: "≥ 0.7x native throughput", Met: met(w/n >= TargetWarm), Runs: min(len(warm), len(native)),
		Command: h.repro(p, bi, "warm", "") + fmt.Sprintf(" ; damselfly mount docker://PROXY/%s:rafs MNT --config C (warm cache.dir)", bi.Repo)}}
}

// filesRows are mount-ready time against file count on every link, and
// memory on the first.
func (h *rig) filesRows(res results, p profile, first bool, bi *benchImage, smallest *float64) []bench.Row {
	var rows []bench.Row
	n := bi.Convert.Stats.Files
	name := fmt.Sprintf("%s @ %s", bi.Name, p.Name)
	if ss := res.get(p, bi, "ready"); len(ss) > 0 && h.o.rows["ready"] {
		d := med(ss, func(s sample) float64 { return s.Seconds })
		r := bench.Row{What: fmt.Sprintf("%s: time to mount-ready (%s bootstrap layer)", name, mib(bi.Convert.BootstrapLayer)), Unit: "s",
			Damselfly: d, Target: "report: should not grow with file count", Runs: len(ss),
			Command: h.repro(p, bi, "ready", "") + fmt.Sprintf(" ; damselfly mount docker://PROXY/%s:rafs MNT --config C", bi.Repo)}
		if *smallest == 0 {
			*smallest = d
		} else {
			r.Ratio, r.RatioNote = d / *smallest, "vs the smallest image"
		}
		rows = append(rows, r)
	}
	ss := res.get(p, bi, "rss")
	if !first || len(ss) == 0 {
		return rows
	}
	target := "report (the ≤ 64 MiB target is set for 200k files)"
	mount := med(ss, func(s sample) float64 { return float64(s.RSS) / (1 << 20) })
	walk := med(ss, func(s sample) float64 { return float64(s.WalkRSS) / (1 << 20) })
	hwm := med(ss, func(s sample) float64 { return float64(s.HWM) / (1 << 20) })
	cmd := h.repro(p, bi, "rss", "") + " ; grep -E 'VmRSS|VmHWM' /proc/$(pgrep -f 'damselfly mount')/status ; find MNT -type f | wc -l"
	mk := func(what string, v float64, text string) bench.Row {
		r := bench.Row{What: name + ": mount daemon " + what, Unit: "MiB", Damselfly: v, DamselflyText: text, Target: target, Runs: len(ss), Command: cmd}
		if n >= targetRSSFiles {
			r.Target, r.Met = fmt.Sprintf("≤ %d MiB", TargetRSSMiB), met(v <= TargetRSSMiB)
		}
		return r
	}
	rows = append(rows,
		mk("VmRSS right after mount-ready", mount, ""),
		mk(fmt.Sprintf("VmRSS after `find -type f` walked all %d files", n), walk,
			fmt.Sprintf("%.1f MiB (peak VmHWM %.1f MiB; the walk took %.2f s)", walk, hwm, med(ss, func(s sample) float64 { return s.Walk }))))
	return rows
}

// med is the median of f over ss.
func med(ss []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return bench.Median(xs)
}
