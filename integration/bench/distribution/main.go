// Command distribution measures how fast a cluster of damselfly nodes
// pulls one image at once, and how much of it the origin registry sends,
// with and without P2P (issues 4 and 5), everything in this process on
// loopback.
//
// The origin is go-containerregistry's in-process registry behind a
// shaped link (integration/bench/shaper). Each node is a peer daemon
// (peer/daemon) whose way to the origin crosses a shaped link of its own
// and then the origin's; its uploads to other peers are capped by the
// exchange's upload limit, and everything it receives (from origin and
// peers) by a token bucket its reader pays before each request. With
// -p2p the nodes share a scheduler; without it each reads from the origin
// alone. A node "pulls" the image by reading every chunk of every blob
// through its batch endpoint with a few requests in flight, as a mount
// daemon reading the whole image would; all nodes start at once.
//
// Each invocation measures one scenario -runs times, from new nodes,
// caches and scheduler each time, and records it in OUT/distribution.json
// and OUT/distribution.md, replacing an earlier result of the same
// scenario and keeping the others. -results FILE instead writes the
// combined benchmark report (RESULTS.md) from OUT.
//
// Files: config.go (Config), bound.go (the physical floor), image.go (the
// synthetic image), registry.go (the origin), cluster.go (links,
// scheduler, nodes), pull.go (one node's pull), run.go (one run),
// report.go (distribution.json and .md), results.go (RESULTS.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	cfg := Default()
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes pulling the image at once")
	flag.IntVar(&cfg.ImageMiB, "mb", cfg.ImageMiB, "image content in MiB (random: blobs are as big)")
	flag.Float64Var(&cfg.NodeMbit, "mbit", cfg.NodeMbit, "each node's link in Mbit/s, each direction (0: unshaped)")
	flag.Float64Var(&cfg.OriginMbit, "origin-mbit", cfg.OriginMbit, "the origin's link in Mbit/s (0: as -mbit)")
	flag.DurationVar(&cfg.RTT, "rtt", cfg.RTT, "round-trip time added to every shaped link")
	flag.BoolVar(&cfg.P2P, "p2p", cfg.P2P, "run a scheduler so that nodes fetch from each other (false: origin only)")
	flag.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs of the scenario, each from fresh nodes")
	flag.IntVar(&cfg.Readers, "readers", cfg.Readers, "requests each node keeps in flight")
	flag.IntVar(&cfg.BatchChunks, "batch-chunks", cfg.BatchChunks, "chunks per request")
	flag.BoolVar(&cfg.ReaderSocket, "reader-socket", false, "readers reach their node's proxy over its unix socket (default: loopback TCP)")
	flag.BoolVar(&cfg.CacheDirect, "cache-direct", false, "node caches use direct I/O (default: the page cache, as the peer daemon's default)")
	flag.IntVar(&cfg.CacheHotMiB, "cache-hot-mb", cfg.CacheHotMiB, "with -cache-direct: MiB of memory per node cache for the chunks cached most recently (cache.hot_bytes; 0: none)")
	flag.BoolVar(&cfg.Spread, "spread", cfg.Spread, "start node i's reading i/nodes of the way into the image (default: every node reads in the same order)")
	flag.IntVar(&cfg.MaxChildren, "tree-max-children", 0, "the scheduler's tree_max_children (0: its default)")
	flag.DurationVar(&cfg.StarveAfter, "tree-starve-after", 0, "the scheduler's tree_starve_after (0: its default)")
	flag.DurationVar(&cfg.HedgeDelay, "hedge-delay", 0, "the peers' hedge_delay (0: their default; negative: no hedging)")
	flag.DurationVar(&cfg.RunTimeout, "run-timeout", cfg.RunTimeout, "bound on one run")
	flag.StringVar(&cfg.Out, "out", cfg.Out, "directory of distribution.json and distribution.md (and, with -results, of the other harnesses' reports)")
	flag.StringVar(&cfg.Work, "work", "", "work directory (default: a new temporary one, removed at the end)")
	flag.BoolVar(&cfg.Verbose, "v", false, "show the daemons' warnings")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measurement to `FILE`")
	memProfile := flag.String("memprofile", "", "write an allocation profile of the whole process to `FILE` at the end")
	results := flag.String("results", "", "write the benchmark report `FILE` (RESULTS.md) from OUT's reports instead of measuring")
	flag.Parse()

	if err := runMain(cfg, *cpuProfile, *memProfile, *results); err != nil {
		fmt.Fprintln(os.Stderr, "distribution:", err)
		os.Exit(1)
	}
}

// runMain measures, or with results writes RESULTS.md, under a CPU
// profile when cpuProfile names a file. When memProfile names one, the
// allocations of the whole process go there at the end.
func runMain(cfg Config, cpuProfile, memProfile, results string) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cpuProfile != "" {
		stopProfile, err := startProfile(cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if memProfile != "" {
		defer func() {
			if werr := writeHeapProfile(memProfile); err == nil {
				err = werr
			}
		}()
	}
	if results != "" {
		return writeResults(results, cfg.Out)
	}
	_, err = run(ctx, cfg, os.Stderr)
	return err
}

// startProfile starts a CPU profile into file; the returned function
// stops it and closes the file.
func startProfile(file string) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes the heap profile, whose alloc_space sample
// counts every byte allocated since the process started.
func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run measures cfg's scenario, records it in cfg.Out and returns it.
// Progress lines go to progress.
func run(ctx context.Context, cfg Config, progress io.Writer) (_ *Scenario, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	say := func(format string, a ...any) { fmt.Fprintf(progress, "distribution: "+format+"\n", a...) }
	log := slog.New(slog.DiscardHandler)
	if cfg.Verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	work := cfg.Work
	if work == "" {
		if work, err = os.MkdirTemp("", "damselfly-distribution-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(work)
	}
	blobDir := filepath.Join(work, "blobs")
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return nil, err
	}
	say("building a %d MiB image", cfg.ImageMiB)
	img, err := buildImage(ctx, blobDir, cfg.ImageMiB, 1)
	if err != nil {
		return nil, err
	}
	reg, err := startRegistry(ctx, img, blobDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := reg.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := os.RemoveAll(blobDir); err != nil { // the registry holds them now
		return nil, err
	}

	s := &Scenario{
		Key: scenarioKey(cfg), Nodes: cfg.Nodes, ImageMiB: cfg.ImageMiB, NodeMbit: cfg.NodeMbit, OriginMbit: cfg.originMbit(),
		RTTms: float64(cfg.RTT) / float64(time.Millisecond), P2P: cfg.P2P, Spread: cfg.Spread, Readers: cfg.Readers, BatchChunks: cfg.BatchChunks,
		MaxChildren: cfg.MaxChildren, StarveAfterMs: float64(cfg.StarveAfter) / float64(time.Millisecond),
		HedgeDelayMs: float64(cfg.HedgeDelay) / float64(time.Millisecond),
		ReaderSocket: cfg.ReaderSocket, CacheDirect: cfg.CacheDirect,
		ImageBytes: img.bytes, ChunkBytes: img.chunk, Measured: time.Now().UTC().Format(time.RFC3339), Machine: machine(),
		Command: command(cfg),
		Bound:   floor(cfg.P2P, cfg.Nodes, img.bytes, img.chunk, bytesPerSec(cfg.NodeMbit), bytesPerSec(cfg.originMbit())),
	}
	if cfg.CacheDirect {
		s.CacheHotMiB = cfg.CacheHotMiB
	}
	say("%s: %d blobs, %d bytes; bound %.2f s (%s)", s.Key, len(img.blobs), img.bytes, s.Bound.Seconds, s.Bound.Binding)
	for i := range cfg.Runs {
		r, err := measure(ctx, cfg, img, reg.addr, filepath.Join(work, fmt.Sprintf("run%d", i)), log)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i+1, err)
		}
		s.Runs = append(s.Runs, r)
		say("run %d/%d: origin sent %.2fx the image; p50 %.2f s, p99 %.2f s, max %.2f s; %.1f CPU-s; cache reads %d (%d from memory) (load %s)",
			i+1, cfg.Runs, r.OriginRatio, r.P50, r.P99, r.Max, r.CPUSeconds, r.CacheReads, r.HotReads, r.Load)
	}
	s.summarise()
	rep, err := loadReport(cfg.Out)
	if err != nil {
		return nil, err
	}
	rep.put(*s)
	if err := rep.write(cfg.Out); err != nil {
		return nil, err
	}
	say("medians: origin %.2fx, p50 %.2f s (%.2fx bound), p99 %.2f s (%.2fx bound); wrote %s",
		s.OriginRatio, s.P50, s.P50Ratio, s.P99, s.P99Ratio, filepath.Join(cfg.Out, reportName+".{json,md}"))
	return s, nil
}

// command is the invocation that reproduces cfg's scenario.
func command(cfg Config) string {
	args := []string{"go run ./integration/bench/distribution",
		fmt.Sprintf("-nodes %d -mb %d -mbit %g", cfg.Nodes, cfg.ImageMiB, cfg.NodeMbit)}
	if cfg.OriginMbit != 0 {
		args = append(args, fmt.Sprintf("-origin-mbit %g", cfg.OriginMbit))
	}
	if cfg.RTT != Default().RTT {
		args = append(args, "-rtt "+cfg.RTT.String())
	}
	if cfg.Spread {
		args = append(args, "-spread")
	}
	if d := Default(); cfg.Readers != d.Readers || cfg.BatchChunks != d.BatchChunks {
		args = append(args, fmt.Sprintf("-readers %d -batch-chunks %d", cfg.Readers, cfg.BatchChunks))
	}
	if cfg.ReaderSocket {
		args = append(args, "-reader-socket")
	}
	if cfg.CacheDirect {
		args = append(args, "-cache-direct")
	}
	if cfg.CacheDirect && cfg.CacheHotMiB != Default().CacheHotMiB {
		args = append(args, fmt.Sprintf("-cache-hot-mb %d", cfg.CacheHotMiB))
	}
	if cfg.MaxChildren != 0 {
		args = append(args, fmt.Sprintf("-tree-max-children %d", cfg.MaxChildren))
	}
	if cfg.StarveAfter != 0 {
		args = append(args, "-tree-starve-after "+cfg.StarveAfter.String())
	}
	if cfg.HedgeDelay != 0 {
		args = append(args, "-hedge-delay="+cfg.HedgeDelay.String())
	}
	args = append(args, fmt.Sprintf("-p2p=%t -runs %d", cfg.P2P, cfg.Runs))
	return strings.Join(args, " ")
}
