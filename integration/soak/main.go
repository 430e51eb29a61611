// Command soak is damselfly's load test (issue 7): a docker-registry, a
// scheduler, several nodes (a peer daemon each, with a node cache far
// smaller than the working set) and FUSE mounts of several generated
// images on every node, all real processes on loopback, built from the
// tree. Many readers read random ranges of random files from random
// mounts for the whole run and compare every byte with the source. Every
// -interval it records each daemon's RSS, open file descriptors, threads
// and goroutines, each node cache's size on disk, and the reads done,
// failed and wrong and bytes by source.
//
// At the end it prints a markdown report (a table over time), writes it
// and the raw samples to -out (soak.md, soak.json, and every process's log
// under logs/), and exits 1 when a read failed or returned wrong bytes, a
// node cache went over its bound, a daemon died or failed to stop, or a
// daemon's RSS, descriptors or goroutines grew (see judge.go for the
// criterion). Ctrl-C stops the readers, then every daemon, and still
// writes the report.
//
//	make soak                       # 10 minutes
//	go run ./integration/soak -duration 2m -readers 8
//
// It needs root, /dev/fuse, docker-registry, umoci and the go command.
// The registry, the processes and the image push are integration/harness,
// shared with the cluster tests and the benchmarks; cluster.go writes the
// daemons' configurations and stops them in order.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	cfg := config{Log: os.Stderr}
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the readers run")
	flag.DurationVar(&cfg.Interval, "interval", 30*time.Second, "time between samples")
	flag.DurationVar(&cfg.Warmup, "warmup", 0, "samples before this are left out of the growth check (0: a fifth of -duration)")
	flag.IntVar(&cfg.Nodes, "nodes", 3, "nodes (peer daemons)")
	flag.IntVar(&cfg.Readers, "readers", 12, "concurrent readers")
	flag.Float64Var(&cfg.Scale, "scale", 0.25, "size of the generated images (1 is about 60 MB for the first)")
	chunk := flag.Uint("chunk-kib", 64, "RAFS chunk size in KiB")
	flag.Float64Var(&cfg.CacheFraction, "cache-fraction", 0.25, "node cache capacity as a fraction of the working set")
	flag.BoolVar(&cfg.CacheDirect, "cache-direct", false, "peers and mounts use direct I/O for the node caches (the peers then keep recent chunks in memory)")
	flag.StringVar(&cfg.Out, "out", "integration/soak/out", "directory for soak.md, soak.json and the process logs")
	flag.Parse()
	cfg.ChunkSize = uint32(*chunk) << 10

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if err := res.write(cfg.Out); err != nil {
		fmt.Fprintln(os.Stderr, "soak: write report:", err)
	}
	fmt.Print(res.markdown())
	fmt.Printf("\nreport written to %s/soak.md and soak.json\n", cfg.Out)
	if len(res.Problems) > 0 {
		os.Exit(1)
	}
}
