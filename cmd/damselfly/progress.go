package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows work done: a bar on a terminal, a line every few seconds
// otherwise, nothing when quiet.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	w     io.Writer
	what  string
	total int64
	done  int64
	last  time.Time
	start time.Time
	quiet bool
}

func newProgress(what string, quiet bool) *progress {
	p := &progress{w: os.Stderr, what: what, start: time.Now(), last: time.Now(), quiet: quiet}
	if !quiet && term.IsTerminal(int(os.Stderr.Fd())) {
		p.bar = progressbar.NewOptions64(-1, progressbar.OptionSetDescription(what),
			progressbar.OptionShowBytes(true), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	return p
}

// SetTotal sets the expected byte count (an estimate is fine).
func (p *progress) SetTotal(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = n
	if p.bar != nil {
		p.bar.ChangeMax64(n)
	}
}

// Add records n more bytes done.
func (p *progress) Add(n int64) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.bar != nil {
		p.bar.Add64(n)
		return
	}
	if time.Since(p.last) >= 5*time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.w, "%s: %s in %s\n", p.what, humanBytes(p.done), time.Since(p.start).Round(time.Second))
	}
}

// Finish clears the bar.
func (p *progress) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
