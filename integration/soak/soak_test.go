package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

// TestShortSoak runs the whole harness for 25 s with small images: real
// registry, scheduler, three peers, twelve FUSE mounts, eight readers. Every read must return the source's bytes, every node
// cache must stay under its bound while eviction runs, every daemon must
// live through the run and stop when asked. The growth check needs a
// longer run (make soak) and is not judged here.
func TestShortSoak(t *testing.T) {
	rafstest.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		rafstest.SkipOrFail(t, "needs /dev/fuse")
	}
	rafstest.RequireTool(t, "docker-registry")
	rafstest.RequireTool(t, "umoci")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cfg := config{
		Duration: 25 * time.Second, Interval: 5 * time.Second,
		Nodes: 3, Readers: 8, Scale: 0.05, CacheFraction: 0.25,
		Out: t.TempDir(), Log: testWriter{t},
	}
	res, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.write(cfg.Out); err != nil {
		t.Fatal(err)
	}
	tot := res.Totals
	t.Logf("measured: %d reads (%d bytes) equal to the source, %d failed, %d wrong; largest node cache %d bytes, capacity %d, bound %d; %d bytes fetched into the caches",
		tot.ReadsOK, tot.ReadBytes, tot.Failed, tot.Wrong, tot.CacheMax, res.Capacity, res.CacheBound, tot.Fetched)
	for _, r := range res.Slowest {
		t.Logf("measured: slow read %.2f s at %s: %s", r.Seconds, r.At, r.Read)
	}
	if res.Warnings > 0 {
		t.Logf("daemon log lines at WARN or ERROR: %d; the first:\n%s", res.Warnings, strings.Join(res.WarnLines, "\n"))
	}
	if tot.Failed != 0 || tot.Wrong != 0 {
		t.Errorf("got %d failed and %d wrong reads, want none; first: %s", tot.Failed, tot.Wrong, strings.Join(res.Failures, "; "))
	}
	if tot.ReadsOK == 0 {
		t.Errorf("got no successful read")
	}
	if tot.CacheMax > res.CacheBound {
		t.Errorf("a node cache held %d bytes, over its bound of %d", tot.CacheMax, res.CacheBound)
	}
	if want := int64(cfg.Nodes) * res.Capacity; tot.Fetched <= want {
		t.Errorf("the peers fetched %d bytes, want more than the %d all caches hold (eviction must run)", tot.Fetched, want)
	}
	if len(res.Samples) < 3 {
		t.Errorf("got %d samples, want at least 3", len(res.Samples))
	}
	for _, s := range res.Samples {
		for _, p := range s.Procs {
			if !p.Exited && (p.RSS == 0 || p.FDs == 0) {
				t.Errorf("sample at %.0f s: %s has RSS %d and %d fds, want both measured", s.At, p.Name, p.RSS, p.FDs)
			}
			if p.Role != "scheduler" && p.Goroutines < 0 {
				t.Errorf("sample at %.0f s: %s exports no go_goroutines", s.At, p.Name)
			}
		}
	}
	if len(res.Problems) > 0 {
		t.Errorf("the run found problems:\n%s", strings.Join(res.Problems, "\n"))
	}
	if t.Failed() {
		t.Logf("report:\n%s", res.markdown())
	}
}

// testWriter sends the harness's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
