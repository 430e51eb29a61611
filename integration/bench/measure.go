package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sample is one measured child process.
type Sample struct {
	Seconds     float64 `json:"seconds"` // wall clock, start to exit
	UserSeconds float64 `json:"user_seconds"`
	SysSeconds  float64 `json:"sys_seconds"`
	MaxRSS      int64   `json:"max_rss_bytes"` // peak resident set of the child
	// OtherCPU is the CPU time the rest of the machine used meanwhile
	// (from /proc/stat): a shared machine's noise, in CPU seconds.
	OtherCPU float64 `json:"other_cpu_seconds"`
	// Waited and BusyBefore: how long the harness waited for a quiet
	// machine before the run, and how many cores others used just before.
	Waited     float64 `json:"waited_seconds,omitempty"`
	BusyBefore float64 `json:"others_cores_before,omitempty"`
}

// CPU is the child's user and system time.
func (s Sample) CPU() float64 { return s.UserSeconds + s.SysSeconds }

// RunChild runs cmd (not yet started) to its end and measures it. The
// error is cmd.Run's; the sample is filled in whenever the child ran.
func RunChild(cmd *exec.Cmd) (Sample, error) {
	busy0 := machineBusy()
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	busy1 := machineBusy()
	var s Sample
	if cmd.ProcessState == nil {
		return s, err
	}
	s.Seconds = wall.Seconds()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.UserSeconds = time.Duration(ru.Utime.Nano()).Seconds()
		s.SysSeconds = time.Duration(ru.Stime.Nano()).Seconds()
		s.MaxRSS = ru.Maxrss << 10 // KiB on Linux
	}
	if busy0 >= 0 && busy1 >= busy0 {
		s.OtherCPU = max(0, busy1-busy0-s.CPU())
	}
	return s, err
}

// machineBusy returns the CPU seconds all processors have spent busy
// since boot, or -1 if /proc/stat cannot be read.
func machineBusy() float64 {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return -1
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "cpu ") {
		return -1
	}
	// user nice system idle iowait irq softirq steal guest guest_nice
	fs := strings.Fields(line)[1:]
	var busy float64
	for i, v := range fs {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return -1
		}
		busy += n
	}
	return busy / 100 // USER_HZ
}

// WaitQuiet waits, up to maxWait, for a half second in which the machine
// is busier than by less than cores CPUs (this process counts as noise:
// call it while idle). It returns the cores used in the last window and
// how long it waited.
func WaitQuiet(ctx context.Context, cores float64, maxWait time.Duration) (float64, time.Duration) {
	start := time.Now()
	const window = 500 * time.Millisecond
	for {
		b0 := machineBusy()
		t := time.NewTimer(window)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, time.Since(start)
		case <-t.C:
		}
		busy := (machineBusy() - b0) / window.Seconds()
		if b0 < 0 || busy < cores || time.Since(start) >= maxWait {
			return busy, time.Since(start)
		}
	}
}

// Meter measures child processes.
type Meter struct {
	// Wrapper is the rusage program (see integration/bench/rusage). With
	// it, the child's peak RSS is its own; without, Linux reports at least
	// the peak RSS this process ever had.
	Wrapper string
	// Nice is the nice value children run at (through Wrapper only).
	Nice int
}

// Measure runs argv as a child process and returns its wall time, CPU
// time and peak RSS, and its stdout. A child that fails is an error
// carrying the end of its stderr.
func (m Meter) Measure(ctx context.Context, argv []string) (Sample, []byte, error) {
	var out string
	if m.Wrapper != "" {
		f, err := os.CreateTemp("", "rusage-*.json")
		if err != nil {
			return Sample{}, nil, err
		}
		out = f.Name()
		f.Close()
		defer os.Remove(out)
		w := []string{m.Wrapper, out}
		if m.Nice != 0 {
			w = []string{m.Wrapper, "-nice", strconv.Itoa(m.Nice), out}
		}
		argv = append(w, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	s, err := RunChild(cmd)
	if err != nil {
		return Sample{}, nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, lastLines(stderr.Bytes(), 10))
	}
	if m.Wrapper != "" {
		data, err := os.ReadFile(out)
		if err != nil {
			return Sample{}, nil, err
		}
		s = Sample{}
		if err := json.Unmarshal(data, &s); err != nil {
			return Sample{}, nil, fmt.Errorf("rusage output: %w", err)
		}
	}
	return s, stdout.Bytes(), nil
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Field returns f of every sample.
func Field(ss []Sample, f func(Sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// WarmLayout reads every blob of the OCI layout at dir once, so that the
// runs measured after it all find the source in the page cache.
func WarmLayout(dir string) error {
	return filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	})
}
