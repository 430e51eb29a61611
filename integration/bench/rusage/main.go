// Command rusage runs a command and writes its wall time, CPU time and
// peak RSS to a JSON file (a bench.Sample), exiting with the command's
// status. The benchmark harness starts converters through it because on
// Linux a child's ru_maxrss starts at the high-water RSS of the process
// that forked it (Go forks with CLONE_VM, so exec inherits the parent's
// peak): measured directly from a harness that once held gigabytes, every
// child would report that. This small process's children report their
// own peak.
//
//	rusage [-nice N] OUT.json CMD [ARG...]
//
// With -nice the command runs at that nice value (negative needs root),
// so that other work on a shared machine disturbs the measurement less.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"damselfly/integration/bench"
)

func main() {
	nice := flag.Int("nice", 0, "nice value for the command")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: rusage [-nice N] OUT.json CMD [ARG...]") }
	flag.Parse()
	args := flag.Args()
	if len(args) < 2 {
		flag.Usage()
		os.Exit(2)
	}
	if *nice != 0 {
		// On Linux the nice value belongs to a thread, and a forked child
		// takes its forking thread's: set it on the thread that will fork.
		runtime.LockOSThread()
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, *nice); err != nil {
			fmt.Fprintf(os.Stderr, "rusage: nice %d: %v; running at the default priority\n", *nice, err)
		}
	}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	s, err := bench.RunChild(cmd)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, "rusage:", err)
		os.Exit(2)
	}
	data, _ := json.Marshal(s)
	if werr := os.WriteFile(args[0], data, 0o644); werr != nil {
		fmt.Fprintln(os.Stderr, "rusage:", werr)
		os.Exit(2)
	}
	if exit != nil {
		os.Exit(max(exit.ExitCode(), 1))
	}
}
