package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxRange is the longest partial read; a quarter of reads take the whole
// file instead.
const maxRange = 512 << 10

// keptFailures is how many failure messages the report keeps.
const keptFailures = 20

// readStats are the readers' counters, updated as they go.
type readStats struct {
	ok, failed, wrong atomic.Int64
	bytes             atomic.Int64 // bytes read and found equal to the source
	maxNanos          atomic.Int64 // slowest read so far

	// over1s and over10s count reads that took longer than 1 s and 10 s.
	over1s, over10s atomic.Int64

	mu       sync.Mutex
	failures []string   // the first keptFailures messages
	slowest  []slowRead // the keptSlow slowest reads, slowest first
}

// keptSlow is how many of the slowest reads the report names.
const keptSlow = 5

// slowRead is one read that took long, for the report.
type slowRead struct {
	At      string  `json:"at"` // UTC time the read started
	Seconds float64 `json:"seconds"`
	Read    string  `json:"read"` // node, image, file and range
}

// took records a read's duration.
func (s *readStats) took(d time.Duration, started time.Time, what func() string) {
	if d > time.Second {
		s.over1s.Add(1)
	}
	if d > 10*time.Second {
		s.over10s.Add(1)
	}
	for {
		old := s.maxNanos.Load()
		if int64(d) <= old || s.maxNanos.CompareAndSwap(old, int64(d)) {
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slowest) == keptSlow && d.Seconds() <= s.slowest[keptSlow-1].Seconds {
		return
	}
	r := slowRead{At: started.UTC().Format("15:04:05.000"), Seconds: d.Seconds(), Read: what()}
	i := len(s.slowest)
	for i > 0 && s.slowest[i-1].Seconds < r.Seconds {
		i--
	}
	s.slowest = append(s.slowest[:i], append([]slowRead{r}, s.slowest[i:]...)...)
	if len(s.slowest) > keptSlow {
		s.slowest = s.slowest[:keptSlow]
	}
}

func (s *readStats) slow() []slowRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]slowRead(nil), s.slowest...)
}

func (s *readStats) fail(wrong bool, format string, a ...any) {
	if wrong {
		s.wrong.Add(1)
	} else {
		s.failed.Add(1)
	}
	s.mu.Lock()
	if len(s.failures) < keptFailures {
		s.failures = append(s.failures, time.Now().UTC().Format(time.TimeOnly)+" "+fmt.Sprintf(format, a...))
	}
	s.mu.Unlock()
}

func (s *readStats) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// reader reads random ranges of random files of random mounts until ctx
// ends, comparing every byte with the image's reference tree. Before
// closing a file it drops the file's pages from the kernel page cache, so
// that the next read of it reaches the mount daemon again.
type reader struct {
	mounts []*mount
	stats  *readStats
	r      *rand.Rand
	got    []byte
	want   []byte
	// lastErr describes the last failed or wrong read.
	lastErr error
	// started is when the current read began (unix nanoseconds), 0 between
	// reads: the sampler counts reads stuck for longer than readTimeout.
	started atomic.Int64
}

func (rd *reader) run(ctx context.Context) {
	for ctx.Err() == nil {
		m := rd.mounts[rd.r.IntN(len(rd.mounts))]
		f := m.im.files[rd.r.IntN(len(m.im.files))]
		off, n := int64(0), f.size
		if rd.r.IntN(4) != 0 {
			off = rd.r.Int64N(f.size)
			n = min(f.size-off, 1+rd.r.Int64N(maxRange))
		}
		begin := time.Now()
		rd.started.Store(begin.UnixNano())
		err := rd.readOne(m, f, off, n)
		rd.started.Store(0)
		rd.stats.took(time.Since(begin), begin, func() string {
			return fmt.Sprintf("%s %s: %s [%d, +%d)", m.n.name, m.im.name, f.path, off, n)
		})
		if err != nil {
			// The mount must never fail a read, shutting down or not: the
			// harness stops its readers before it stops any daemon.
			rd.stats.fail(err == errWrong, "%s %s: %s [%d, +%d): %v", m.n.name, m.im.name, f.path, off, n, rd.lastErr)
			continue
		}
		rd.stats.ok.Add(1)
		rd.stats.bytes.Add(n)
	}
}

// errWrong marks a read whose bytes differ from the source; lastErr then
// says where.
var errWrong = fmt.Errorf("bytes differ from the source")

func (rd *reader) readOne(m *mount, f file, off, n int64) error {
	rd.got = grow(rd.got, n)
	rd.want = grow(rd.want, n)
	if err := readAt(filepath.Join(m.dir, f.path), rd.got, off, true); err != nil {
		rd.lastErr = err
		return err
	}
	if err := readAt(filepath.Join(m.im.root, f.path), rd.want, off, false); err != nil {
		// The reference tree is the harness's own; losing it is a failure
		// of the harness, reported like a failed read.
		rd.lastErr = fmt.Errorf("reference: %w", err)
		return rd.lastErr
	}
	if !bytes.Equal(rd.got, rd.want) {
		i := 0
		for i < len(rd.got) && rd.got[i] == rd.want[i] {
			i++
		}
		rd.lastErr = fmt.Errorf("first differing byte at offset %d", off+int64(i))
		return errWrong
	}
	return nil
}

func grow(b []byte, n int64) []byte {
	if int64(cap(b)) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// readAt fills p from path at off; drop drops the file's cached pages
// afterwards.
func readAt(path string, p []byte, off int64, drop bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(p, off)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the file is shorter than the source's
	}
	if drop {
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	return err
}

// stuck counts readers whose current read has run longer than timeout.
func stuck(readers []*reader, timeout time.Duration) int {
	now := time.Now().UnixNano()
	n := 0
	for _, rd := range readers {
		if s := rd.started.Load(); s != 0 && time.Duration(now-s) > timeout {
			n++
		}
	}
	return n
}
