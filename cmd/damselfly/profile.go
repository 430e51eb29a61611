package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
)

// envProfileDir names a directory into which every damselfly process
// writes a CPU profile of its whole life and, at exit, a heap profile
// (its allocs sample index is what allocated): NAME-PID.cpu.pprof and
// NAME-PID.heap.pprof, NAME the daemon's subcommand. It is for
// measuring the daemons where they are deployed (the benchmarks start
// them as separate processes, which inherit the environment); unset, as
// it is by default, nothing is profiled. Not a configuration key: no
// operator needs it.
const envProfileDir = "DAMSELFLY_PPROF_DIR"

// startProfiles starts the CPU profile when envProfileDir is set and
// returns what ends it and writes the heap profile. Failures are
// reported and do not stop the command.
func startProfiles(args []string) (stop func()) {
	dir := os.Getenv(envProfileDir)
	if dir == "" {
		return func() {}
	}
	name := "damselfly"
	for _, a := range args {
		if slices.Contains([]string{"mount", "peer", "scheduler", "convert", "unpack", "check", "demo"}, a) {
			name = a
			break
		}
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%d", name, os.Getpid()))
	warn := func(err error) { fmt.Fprintf(os.Stderr, "damselfly: %s: %v\n", envProfileDir, err) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		warn(err)
		return func() {}
	}
	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		warn(err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		warn(err)
		cpu.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			warn(err)
		}
		heap, err := os.Create(base + ".heap.pprof")
		if err != nil {
			warn(err)
			return
		}
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(heap, 0); err != nil {
			warn(err)
		}
		if err := heap.Close(); err != nil {
			warn(err)
		}
	}
}
