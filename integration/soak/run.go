package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"damselfly/integration/harness"
	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// readTimeout is how long one read may take before the sampler counts it
// as stuck (a failure): far longer than any read of this size should take
// on loopback, and shorter than the run.
const readTimeout = 60 * time.Second

// config is one soak run.
type config struct {
	Duration time.Duration // how long the readers run
	Interval time.Duration // between samples
	// Warmup is left out of the growth check: caches fill, connection
	// pools and the Go heap settle. 0 means a fifth of Duration.
	Warmup    time.Duration
	Nodes     int
	Readers   int
	Scale     float64 // of the sample images; 0.2 is about 12 MB for the first
	ChunkSize uint32
	// CacheFraction sizes every node cache as a fraction of the working
	// set (the distinct blob bytes of all images).
	CacheFraction float64
	// CacheDirect has the peers and mounts read and write the node caches
	// with direct I/O (cache.direct_io), the peers keeping recent chunks
	// in memory (cache.hot_bytes, its default).
	CacheDirect bool
	Out         string    // directory for soak.json, soak.md and logs; "" for a temporary one
	Log         io.Writer // progress lines
}

func (c config) validate() error {
	var errs []error
	if c.Duration <= 0 || c.Interval <= 0 || c.Interval > c.Duration {
		errs = append(errs, fmt.Errorf("duration %s and interval %s: want 0 < interval <= duration", c.Duration, c.Interval))
	}
	if c.Nodes < 2 {
		errs = append(errs, fmt.Errorf("nodes: %d, want at least 2 (peers must serve each other)", c.Nodes))
	}
	if c.Readers < 1 {
		errs = append(errs, fmt.Errorf("readers: %d, want at least 1", c.Readers))
	}
	if c.Scale <= 0 {
		errs = append(errs, fmt.Errorf("scale: %v, want > 0", c.Scale))
	}
	if c.CacheFraction <= 0 || c.CacheFraction >= 1 {
		errs = append(errs, fmt.Errorf("cache fraction: %v, want in (0, 1)", c.CacheFraction))
	}
	return errors.Join(errs...)
}

// result is what a run measured, with its verdict.
type result struct {
	Config struct {
		Duration  string  `json:"duration"`
		Interval  string  `json:"interval"`
		Warmup    string  `json:"warmup"`
		Nodes     int     `json:"nodes"`
		Readers   int     `json:"readers"`
		Scale     float64 `json:"scale"`
		ChunkSize uint32  `json:"chunk_size"`
		// CacheDirect: the node caches used direct I/O.
		CacheDirect bool `json:"cache_direct,omitempty"`
	} `json:"config"`
	Started    time.Time   `json:"started"`
	Images     []imageInfo `json:"images"`
	SharedBlob int         `json:"shared_blobs"`
	WorkingSet int64       `json:"working_set_bytes"`
	Capacity   int64       `json:"cache_capacity_bytes"`
	CacheBound int64       `json:"cache_bound_bytes"` // the watermark tolerance, see cacheBound
	Samples    []snapshot  `json:"samples"`
	Totals     totals      `json:"totals"`
	Growth     []growthRow `json:"growth"`
	Shutdown   string      `json:"shutdown_error,omitempty"`
	Problems   []string    `json:"problems"`
	Failures   []string    `json:"failure_messages,omitempty"`
	Slowest    []slowRead  `json:"slowest_reads,omitempty"`
	// Warnings counts the daemons' log lines at WARN or ERROR; WarnLines
	// are the first of them (collectWarnings).
	Warnings  int      `json:"daemon_warnings"`
	WarnLines []string `json:"daemon_warning_lines,omitempty"`
	// StallDumps counts the scheduler views saved for reads that ran
	// stallAfter (watchStalls), as stall-N-*.json beside the logs.
	StallDumps int `json:"stall_dumps,omitempty"`
	warmup     time.Duration
	nodeNames  []string
}

type imageInfo struct {
	Name      string `json:"name"`
	Files     int    `json:"files"`
	FileBytes int64  `json:"file_bytes"`
	Blobs     int    `json:"blobs"`
	BlobBytes int64  `json:"blob_bytes"`
}

// totals are the readers' counts once they have all stopped.
type totals struct {
	ReadsOK   int64   `json:"reads_ok"`
	Failed    int64   `json:"reads_failed"`
	Wrong     int64   `json:"reads_wrong"`
	ReadBytes int64   `json:"read_bytes"`
	MaxRead   float64 `json:"slowest_read_seconds"`
	Over1s    int64   `json:"reads_over_1s"`
	Over10s   int64   `json:"reads_over_10s"`
	CacheMax  int64   `json:"cache_max_bytes"` // entries, over every node and sample
	TmpMax    int64   `json:"tmp_max_bytes"`   // temporary files, likewise
	// OverCapacity counts node-intervals in which a cache's entries went
	// over its capacity (allowed up to the bound, see cacheBound).
	OverCapacity int `json:"over_capacity_intervals"`
	// Fetched is what all peers put into their node caches (from other
	// peers and the registry): a multiple of the capacity means eviction
	// ran all the time.
	Fetched int64 `json:"fetched_into_caches_bytes"`
}

// cacheBound is the most a node cache may hold with writers processes
// writing into it, as rafs/cache/CACHE.md derives it: every rescan leaves
// the directory at or below the high watermark, and each writer writes
// less than Capacity×(High−Low)/2 before its next rescan.
func cacheBound(capacity int64, writers int) int64 {
	high, low := cache.DefaultHighWatermark, cache.DefaultLowWatermark
	return int64(math.Round(float64(capacity) * (high + float64(writers)*(high-low)/2)))
}

// run is the whole soak: build, start, read and sample for cfg.Duration,
// stop everything, judge. It returns an error only when the soak could
// not run; a run that found problems returns them in result.Problems.
func run(ctx context.Context, cfg config) (_ *result, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the soak mounts FUSE filesystems as root: run it as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("the soak needs FUSE: %w", err)
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = cfg.Duration / 5
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = rafs.MinChunkSize
	}
	began := time.Now()
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "soak: [%5.1fs] "+format+"\n", append([]any{time.Since(began).Seconds()}, a...)...)
		}
	}
	res := &result{Started: time.Now().UTC(), warmup: cfg.Warmup}
	res.Config.Duration, res.Config.Interval, res.Config.Warmup = cfg.Duration.String(), cfg.Interval.String(), cfg.Warmup.String()
	res.Config.Nodes, res.Config.Readers, res.Config.Scale, res.Config.ChunkSize = cfg.Nodes, cfg.Readers, cfg.Scale, cfg.ChunkSize
	res.Config.CacheDirect = cfg.CacheDirect

	work, err := os.MkdirTemp("", "damselfly-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	c := &cluster{dir: work, logs: filepath.Join(work, "logs"), direct: cfg.CacheDirect}
	if cfg.Out != "" {
		c.logs = filepath.Join(cfg.Out, "logs")
		os.RemoveAll(c.logs)
	}
	if err := os.MkdirAll(c.logs, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if cerr := c.close(); cerr != nil {
			res.Shutdown = cerr.Error()
			if err == nil {
				res.Problems = append(res.Problems, "shutdown: "+cerr.Error())
			}
		}
		res.Warnings, res.WarnLines = collectWarnings(c.logs)
	}()

	logf("building damselfly")
	c.binary = filepath.Join(work, "damselfly")
	if err := harness.Build(ctx, "", c.binary, harness.MainPackage); err != nil {
		return nil, err
	}
	if err := c.startRegistry(ctx); err != nil {
		return nil, err
	}
	logf("registry on %s; building images", c.regHost)
	images, err := buildImages(ctx, c.binary, filepath.Join(work, "images"), c.regHost, imageSpecs(cfg.Scale), cfg.ChunkSize)
	if err != nil {
		return nil, err
	}
	for _, im := range images {
		info := imageInfo{Name: im.name, Files: len(im.files), Blobs: len(im.blobs)}
		for _, f := range im.files {
			info.FileBytes += f.size
		}
		for _, s := range im.blobs {
			info.BlobBytes += s
		}
		res.Images = append(res.Images, info)
	}
	res.WorkingSet, res.SharedBlob = workingSet(images), sharedBlobs(images)
	res.Capacity = int64(float64(res.WorkingSet) * cfg.CacheFraction)
	res.CacheBound = cacheBound(res.Capacity, 1+len(images))
	logf("%d images, working set %.1f MiB (%d blobs shared), node cache capacity %.1f MiB (bound %.1f MiB)",
		len(images), mib(res.WorkingSet), res.SharedBlob, mib(res.Capacity), mib(res.CacheBound))

	if err := c.startScheduler(); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		if err := c.addNode(fmt.Sprintf("node%d", i), res.Capacity); err != nil {
			return nil, err
		}
	}
	var mounts []*mount
	for _, n := range c.nodes {
		res.nodeNames = append(res.nodeNames, n.name)
		for _, im := range images {
			if err := c.mount(ctx, n, im); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, n.mounts...)
	}
	logf("%d nodes, %d mounts up; %d readers for %s", len(c.nodes), len(mounts), cfg.Readers, cfg.Duration)

	ds := c.daemons()
	stats := &readStats{}
	readCtx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watch := &cacheWatch{}
	var watchWG sync.WaitGroup
	watchWG.Go(func() { watch.run(watchCtx, c.nodes) })
	defer func() { stopWatch(); watchWG.Wait() }()

	readers := make([]*reader, cfg.Readers)
	var readWG sync.WaitGroup
	start := time.Now()
	for i := range readers {
		readers[i] = &reader{mounts: mounts, stats: stats, r: rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))}
		readWG.Go(func() { readers[i].run(readCtx) })
	}
	watchWG.Go(func() { res.StallDumps = watchStalls(watchCtx, readers, c.schedURL, c.logs) })

	end := start.Add(cfg.Duration)
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	interrupted := false
	for {
		s := takeSample(c, ds, watch, stats, readers, start)
		res.Samples = append(res.Samples, s)
		logf("%s", progressLine(s))
		if !time.Now().Before(end) {
			break
		}
		wait := time.NewTimer(time.Until(end))
		select {
		case <-ctx.Done():
			interrupted = true
		case <-tick.C:
		case <-wait.C:
		}
		wait.Stop()
		if interrupted {
			res.Samples = append(res.Samples, takeSample(c, ds, watch, stats, readers, start))
			break
		}
	}

	// Readers stop before any daemon does: every failed read is the
	// system's, none is the shutdown's.
	stopReaders()
	stopped := make(chan struct{})
	go func() { readWG.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(readTimeout):
		res.Problems = append(res.Problems, fmt.Sprintf("readers still blocked in reads %s after the end", readTimeout))
		c.close() // unmounting ends the blocked reads (with errors)
		<-stopped
	}
	res.Totals = totals{ReadsOK: stats.ok.Load(), Failed: stats.failed.Load(), Wrong: stats.wrong.Load(),
		ReadBytes: stats.bytes.Load(), MaxRead: time.Duration(stats.maxNanos.Load()).Seconds(),
		Over1s: stats.over1s.Load(), Over10s: stats.over10s.Load()}
	res.Failures, res.Slowest = stats.messages(), stats.slow()
	if interrupted {
		res.Problems = append(res.Problems, fmt.Sprintf("interrupted after %s of %s", time.Since(start).Round(time.Second), cfg.Duration))
	}
	res.judge()
	logf("readers stopped; stopping the cluster")
	return res, nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
