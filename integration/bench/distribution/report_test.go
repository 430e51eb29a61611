package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func scenario(cfg Config, origin, p50, p99 float64) Scenario {
	s := Scenario{Key: scenarioKey(cfg), Nodes: cfg.Nodes, ImageMiB: cfg.ImageMiB, NodeMbit: cfg.NodeMbit, OriginMbit: cfg.originMbit(),
		P2P: cfg.P2P, Readers: cfg.Readers, BatchChunks: cfg.BatchChunks, ImageBytes: int64(cfg.ImageMiB) << 20, Command: command(cfg), Measured: "2026-01-02T03:04:05Z",
		Bound: floor(cfg.P2P, cfg.Nodes, int64(cfg.ImageMiB)<<20, 1<<20, bytesPerSec(cfg.NodeMbit), bytesPerSec(cfg.originMbit()))}
	for _, d := range []float64{0.9, 1, 1.1} {
		s.Runs = append(s.Runs, RunResult{OriginRatio: origin * d, P50: p50 * d, P99: p99 * d, Max: p99 * d, Load: "1.00 2.00 3.00"})
	}
	s.summarise()
	return s
}

func TestReportMergeAndWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p2p := Default()
	base := Default()
	base.P2P = false
	rep, err := loadReport(dir)
	if err != nil || len(rep.Scenarios) != 0 {
		t.Fatalf("missing report: got %v, %v; want an empty report", rep, err)
	}
	rep.put(scenario(base, 8, 21.5, 21.6))
	rep.put(scenario(p2p, 1.5, 9, 10))
	rep.put(scenario(p2p, 1.01, 3, 3.5)) // replaces the first P2P result
	if err := rep.write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := loadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Scenarios) != 2 || !back.Scenarios[0].P2P || back.Scenarios[1].P2P {
		t.Fatalf("got %d scenarios, want 2, P2P first", len(back.Scenarios))
	}
	s := back.Scenarios[0]
	if s.OriginRatio != 1.01 || s.P50 != 3 || s.P99 != 3.5 {
		t.Errorf("P2P medians: got origin %v, p50 %v, p99 %v; want 1.01, 3, 3.5 (the later result)", s.OriginRatio, s.P50, s.P99)
	}
	if want := 3 / s.Bound.Seconds; s.P50Ratio != want {
		t.Errorf("p50/bound: got %v, want %v", s.P50Ratio, want)
	}
	md, err := os.ReadFile(filepath.Join(dir, "distribution.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 8 x 64 MiB | 200 Mbit/s / 200 Mbit/s | P2P | 3 | 1.01x | 3.00 s | 3.50 s |",
		"egress <= 1.05x: yes; p50, p99 <= 1.5x bound: yes, yes",
		"| origin only | 3 | 8.00x |",
		"baseline (ideal 8x)",
		"with P2P the origin sent 1.01x the image (8.00x without)",
		"go run ./integration/bench/distribution -nodes 8 -mb 64 -mbit 200 -p2p=false -runs 3",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("distribution.md lacks %q:\n%s", want, md)
		}
	}
}

func TestTargetsNotMet(t *testing.T) {
	t.Parallel()
	s := scenario(Default(), 2.2, 10, 30)
	if got := targets(s); !strings.Contains(got, "egress <= 1.05x: **no**") || !strings.Contains(got, "**no**, **no**") {
		t.Errorf("got %q, want every target marked not met", got)
	}
}

func TestWriteResults(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	rep := &Report{}
	rep.put(scenario(Default(), 1.02, 3, 4))
	if err := rep.write(out); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "convert.md"), []byte("# damselfly convert benchmarks\n\n| a | b |\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := writeResults(file, out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	for _, want := range []string{
		"# damselfly benchmark results",
		"## P2P distribution (issues 4 and 5)",
		"The bound is the physical floor",
		"| 8 x 64 MiB |",
		"### damselfly convert benchmarks", // demoted under its section
		"## Mount and read\n\nNot measured here: `make bench-mount`.",
		time.Now().UTC().Format("2006-01-02"),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("RESULTS.md lacks %q:\n%s", want, got)
		}
	}
	// RESULTS.json holds the distribution report (the only JSON one
	// here) and nothing for the harnesses that did not run.
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "RESULTS.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]Report
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || len(all["distribution"].Scenarios) != 1 || all["distribution"].Scenarios[0].Nodes != 8 {
		t.Errorf("RESULTS.json: %s", raw)
	}
	if err := os.WriteFile(filepath.Join(out, "mount.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeResults(file, out); err == nil {
		t.Error("a report that is not JSON was gathered")
	}
}

func TestStarTime(t *testing.T) {
	t.Parallel()
	s := scenario(Default(), 1, 3, 4)
	if got, want := starTime(s), 7*float64(64<<20)/25e6; got != want {
		t.Errorf("8 nodes, 64 MiB, 200 Mbit/s: got %v s, want %v s", got, want)
	}
	s.P2P = false
	if got := starTime(s); got != 0 {
		t.Errorf("origin only: got %v, want 0", got)
	}
}

func TestWriteResultsKeepsNotes(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	file := filepath.Join(t.TempDir(), "RESULTS.md")
	notes := notesMarker + "\n\n## Findings\n\nwritten by hand\n"
	if err := os.WriteFile(file, []byte("# old generated part\n\n"+notes), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeResults(file, out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	if strings.Contains(got, "old generated part") || !strings.HasSuffix(got, notes) || strings.Count(got, notesMarker) != 1 {
		t.Errorf("got:\n%s\nwant the generated part replaced and the notes kept once at the end", got)
	}
	if !strings.Contains(got, "Not measured: `make bench-distribution`.") {
		t.Errorf("an empty out dir: got:\n%s\nwant the distribution section to say it was not measured", got)
	}
}
