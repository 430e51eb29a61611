package bench

import (
	"damselfly/rafs/rafstest"

	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v): got %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestMeasure(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		rafstest.SkipOrFail(t, "needs sh")
	}
	s, out, err := (Meter{}).Measure(t.Context(), []string{sh, "-c", "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "hi\n" {
		t.Errorf("got stdout %q, want %q", out, "hi\n")
	}
	if s.Seconds <= 0 || s.MaxRSS <= 0 {
		t.Errorf("got %+v, want a positive wall time and peak RSS", s)
	}
	if _, _, err := (Meter{}).Measure(t.Context(), []string{sh, "-c", "echo oops >&2; exit 3"}); err == nil {
		t.Error("got no error from a failing child")
	}
}

// TestMeterWrapper checks that through the rusage wrapper a small child
// reports its own peak RSS, not this process's (raised here on purpose).
func TestMeterWrapper(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		rafstest.SkipOrFail(t, "needs sh")
	}
	wrapper := filepath.Join(t.TempDir(), "rusage")
	if out, err := exec.Command(gobin, "build", "-o", wrapper, "./rusage").CombinedOutput(); err != nil {
		t.Fatalf("go build ./rusage: %v: %s", err, out)
	}
	ballast := make([]byte, 256<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	s, _, err := Meter{Wrapper: wrapper}.Measure(t.Context(), []string{sh, "-c", "true"})
	if err != nil {
		t.Fatal(err)
	}
	direct, _, err := (Meter{}).Measure(t.Context(), []string{sh, "-c", "true"})
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(ballast)
	t.Logf("peak RSS of sh: %d KiB through the wrapper, %d KiB measured directly", s.MaxRSS>>10, direct.MaxRSS>>10)
	if s.MaxRSS <= 0 || s.MaxRSS > 64<<20 {
		t.Errorf("got peak RSS %d MiB through the wrapper, want sh's own few MiB", s.MaxRSS>>20)
	}
	if os.Geteuid() == 0 {
		// Field 19 of /proc/PID/stat is the nice value.
		_, out, err := (Meter{Wrapper: wrapper, Nice: -5}).Measure(t.Context(), []string{sh, "-c", `cut -d" " -f19 /proc/$$/stat`})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != "-5" {
			t.Errorf("got nice %q through the wrapper, want -5", got)
		}
	}
	if _, _, err := (Meter{Wrapper: wrapper}).Measure(t.Context(), []string{sh, "-c", "exit 3"}); err == nil {
		t.Error("got no error from a failing child through the wrapper")
	}
}
