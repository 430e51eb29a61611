package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxWarnings bounds the daemon warnings a result keeps.
const maxWarnings = 40

// collectWarnings returns how many lines at level WARN or ERROR the
// daemons' logs in dir hold, and the first maxWarnings of them, each
// prefixed with its log's name (node0-peer, scheduler, ...). A healthy run
// logs none; the ones it does log (a slow fetch, origin turns that ran
// out, a peer avoided) say why a read was slow.
func collectWarnings(dir string) (n int, lines []string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.Sort(logs)
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".log")
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, " level=WARN ") && !strings.Contains(line, " level=ERROR ") {
				continue
			}
			n++
			if len(lines) < maxWarnings {
				if len(line) > 400 {
					line = line[:400] + "..."
				}
				lines = append(lines, name+": "+line)
			}
		}
		f.Close()
	}
	return n, lines
}
