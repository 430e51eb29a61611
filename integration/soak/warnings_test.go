package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCollectWarnings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("scheduler.log", "time=1 level=INFO msg=serving\ntime=2 level=WARN msg=\"origin turns ran out undelivered\" turns=2\n")
	var many strings.Builder
	for i := range maxWarnings + 5 {
		fmt.Fprintf(&many, "time=%d level=ERROR msg=bad n=%d %s\n", i, i, strings.Repeat("x", 500))
		many.WriteString("time=0 level=INFO msg=fine\n")
	}
	write("node0-peer.log", many.String())
	write("notes.txt", "time=1 level=WARN msg=not-a-log\n")

	n, lines := collectWarnings(dir)
	if n != maxWarnings+6 {
		t.Errorf("counted %d warning lines, want %d", n, maxWarnings+6)
	}
	if len(lines) != maxWarnings {
		t.Fatalf("kept %d lines, want %d", len(lines), maxWarnings)
	}
	// Logs in name order: node0-peer before scheduler.
	if !strings.HasPrefix(lines[0], "node0-peer: time=0 level=ERROR msg=bad n=0 ") || !strings.HasSuffix(lines[0], "...") {
		t.Errorf("first line %q", lines[0][:min(len(lines[0]), 80)])
	}
	for _, l := range lines {
		if len(l) > 450 {
			t.Errorf("line of %d bytes kept, want it cut", len(l))
		}
	}
	if n, lines := collectWarnings(filepath.Join(dir, "none")); n != 0 || len(lines) != 0 {
		t.Errorf("missing directory: %d, %v", n, lines)
	}
}
