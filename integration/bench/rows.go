package bench

import (
	"fmt"
	"slices"
)

// Targets of the "RAFS image format and converter" issue.
const (
	TargetMBps       = 150 // conversion throughput, MB/s of content
	TargetSpeedup    = 2.0 // over eStargz
	TargetRSS        = 256 // MiB, peak, for a 4 GiB image
	TargetBlobsRatio = 0.9 // RAFS blobs / source gzip layers
)

// imageRows turns one image's runs into table rows.
func imageRows(ir *ImageResult) []Row {
	if ir.Convert == nil {
		return nil
	}
	res := ir.Convert
	content := float64(res.Stats.ContentBytes)
	secs := func(s Sample) float64 { return s.Seconds }
	dSec := Median(Field(ir.Damselfly, secs))
	eSec := Median(Field(ir.Baseline, secs))
	dRSS := Median(Field(ir.Damselfly, func(s Sample) float64 { return float64(s.MaxRSS) / (1 << 20) }))
	eRSS := Median(Field(ir.Baseline, func(s Sample) float64 { return float64(s.MaxRSS) / (1 << 20) }))
	both := ir.DamselflyCmd + " ; " + ir.EStargzCmd
	n := fmt.Sprintf("%s (%s content, %s gzip)", ir.Name, humanBytes(content), humanBytes(float64(res.SourceLayers)))
	var rows []Row

	dMBps := content / 1e6 / dSec
	dCPU := Median(Field(ir.Damselfly, Sample.CPU))
	thr := Row{What: n + ": convert throughput", Unit: "MB/s", Damselfly: dMBps,
		DamselflyText: fmt.Sprintf("%.0f MB/s (best %.0f; CPU %.1f s)", dMBps, content/1e6/slices.Min(Field(ir.Damselfly, secs)), dCPU),
		Target:        fmt.Sprintf("≥ %d MB/s", TargetMBps), Met: met(dMBps >= TargetMBps), Runs: len(ir.Damselfly), Command: both}
	if ir.EStargz != nil {
		eMBps := content / 1e6 / eSec
		thr.Baseline, thr.BaselineName, thr.Ratio = eMBps, "eStargz", dMBps/eMBps
		thr.BaselineText = fmt.Sprintf("%.0f MB/s (eStargz; best %.0f; CPU %.1f s)", eMBps,
			content/1e6/slices.Min(Field(ir.Baseline, secs)), Median(Field(ir.Baseline, Sample.CPU)))
		rows = append(rows, thr, Row{What: n + ": convert time", Unit: "s", Damselfly: dSec, Baseline: eSec, BaselineName: "eStargz",
			Ratio: eSec / dSec, RatioNote: "eStargz/damselfly", Target: fmt.Sprintf("≥ %.0fx faster", TargetSpeedup),
			Met: met(eSec/dSec >= TargetSpeedup), Runs: min(len(ir.Damselfly), len(ir.Baseline)), Command: both})
		dc, ec := dCPU, Median(Field(ir.Baseline, Sample.CPU))
		rows = append(rows, Row{What: n + ": convert CPU time (user+sys; robust to a busy machine)", Unit: "s", Damselfly: dc,
			Baseline: ec, BaselineName: "eStargz", Ratio: ec / dc, RatioNote: "eStargz/damselfly", Target: "report",
			Runs: min(len(ir.Damselfly), len(ir.Baseline)), Command: both})
	} else {
		rows = append(rows, thr)
	}

	rss := Row{What: n + ": peak RSS", Unit: "MiB", Damselfly: dRSS, Runs: len(ir.Damselfly), Command: both,
		Target: fmt.Sprintf("≤ %d MiB (set for a 4 GiB image)", TargetRSS)}
	if ir.RSSTarget {
		rss.Met = met(dRSS <= TargetRSS)
	} else {
		rss.Target = fmt.Sprintf("report (≤ %d MiB is the 4 GiB target)", TargetRSS)
	}
	if ir.EStargz != nil {
		rss.Baseline, rss.BaselineName, rss.Ratio = eRSS, "eStargz", dRSS/eRSS
	}
	rows = append(rows, rss)

	blobs, gz := float64(res.NewBlobBytes), float64(res.SourceLayers)
	rows = append(rows, Row{What: n + ": RAFS blobs vs source gzip layers", Unit: "bytes", Damselfly: blobs,
		Baseline: gz, BaselineName: "gzip layers", Ratio: blobs / gz, Target: fmt.Sprintf("≤ %.1fx", TargetBlobsRatio),
		Met: met(blobs/gz <= TargetBlobsRatio), Command: ir.DamselflyCmd})
	if ir.EStargz != nil {
		out := float64(res.NewBlobBytes + res.BootstrapLayer)
		e := float64(ir.EStargz.OutputBytes)
		rows = append(rows, Row{What: n + ": output (blobs + bootstrap layer) vs eStargz layers", Unit: "bytes", Damselfly: out,
			Baseline: e, BaselineName: "eStargz", Ratio: out / e, Target: "smaller (< 1.0x)", Met: met(out < e), Command: both})
	}
	inodes := res.Stats.Files + res.Stats.Dirs + res.Stats.Others
	chunks := res.Stats.NewChunks + res.Stats.DictChunks
	rows = append(rows, Row{What: n + ": bootstrap bytes per file and per chunk", Unit: "bytes", Damselfly: float64(res.BootstrapBytes),
		DamselflyText: fmt.Sprintf("%s: %.0f B/inode (%d inodes), %.0f B/chunk (%d chunks); %s zstd layer",
			humanBytes(float64(res.BootstrapBytes)), float64(res.BootstrapBytes)/float64(max(inodes, 1)), inodes,
			float64(res.BootstrapBytes)/float64(max(chunks, 1)), chunks, humanBytes(float64(res.BootstrapLayer))),
		Target: "report", Command: ir.DamselflyCmd})
	return rows
}

// dedupRows turns a dedup scenario into table rows.
func dedupRows(d *DedupResult) []Row {
	c := d.Check
	n := fmt.Sprintf("dedup %s (%s, then %s --chunk-dict)", d.Name, d.V1Tag, d.V2Tag)
	if d.ConvertError != "" {
		n = fmt.Sprintf("dedup %s (%s, then %s with %s as dict: CLI failed, in-process rafs.Build)", d.Name, d.V1Tag, d.V2Tag, d.V1Tag)
	}
	return []Row{
		{What: n + ": chunks in new blobs that the dict has", Unit: "chunks", Damselfly: float64(c.Duplicates),
			Target: "0", Met: met(c.Duplicates == 0), Command: d.Command},
		{What: n + ": chunks in new blobs vs unique new chunks", Unit: "chunks", Damselfly: float64(c.NewBlobChunks),
			Baseline: float64(c.Unique), BaselineName: "unique to " + d.V2Tag,
			Ratio: float64(c.NewBlobChunks) / float64(max(c.Unique, 1)), Target: "equal, blobs hold nothing else",
			Met: met(c.OK()), Command: d.Command,
			DamselflyText: fmt.Sprintf("%d chunks, %s in %d new blobs (chunks' stored bytes %s)", c.NewBlobChunks,
				humanBytes(float64(c.NewBlobBytes)), c.NewBlobs, humanBytes(float64(c.NewChunkBytes)))},
		{What: n + ": dedup ratio", Unit: "x", Damselfly: d.DedupRatio, Target: "report", Command: d.Command,
			DamselflyText: fmt.Sprintf("%.2fx: %s of content in both images, %s stored raw; %s reuses %d of %d chunks (%.1f%%)",
				d.DedupRatio, humanBytes(float64(d.ContentBytes)), humanBytes(float64(d.RawBytes)), d.V2Tag,
				c.Shared, c.Chunks, 100*float64(c.Shared)/float64(max(c.Chunks, 1)))},
		{What: n + ": bytes stored for both images vs their gzip layers", Unit: "bytes", Damselfly: float64(d.Stored),
			Baseline: float64(d.GzipDistinct), BaselineName: "distinct gzip layers",
			BaselineText: fmt.Sprintf("%s (distinct gzip layers; %s counting shared layers twice)",
				humanBytes(float64(d.GzipDistinct)), humanBytes(float64(d.GzipSum))),
			Ratio: float64(d.Stored) / float64(d.GzipDistinct), Target: "report", Command: d.Command},
	}
}
