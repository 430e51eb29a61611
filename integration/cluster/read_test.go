package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"damselfly/rafs/rafstest"
)

// equalSource requires the mount to equal umoci's unpacking of the
// source: every path, type, mode, owner, link, xattr and byte.
func (m *mount) equalSource(im *image) {
	m.n.c.t.Helper()
	if diffs := rafstest.CompareTreesWith(im.umoci, m.dir, rafstest.CompareOptions{IgnoreMtime: im.src.ImplicitDirs()}); len(diffs) > 0 {
		m.n.c.t.Fatalf("%s: mount differs from the source in %d ways, first: %s", m.n.name, len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
}

// readFiles reads paths (relative to the mount) and compares each with
// the source; it returns the error of each failed read. A read that
// returns wrong bytes fails the test.
func (m *mount) readFiles(im *image, paths []string) (failed map[string]error) {
	m.n.c.t.Helper()
	failed, err := m.readFilesErr(im, paths)
	if err != nil {
		m.n.c.t.Fatal(err)
	}
	return failed
}

// readFilesErr is readFiles for other goroutines than the test's: wrong
// bytes are its error.
func (m *mount) readFilesErr(im *image, paths []string) (failed map[string]error, err error) {
	failed = map[string]error{}
	for _, p := range paths {
		got, err := os.ReadFile(filepath.Join(m.dir, p))
		if err != nil {
			failed[p] = err
			continue
		}
		want, err := os.ReadFile(filepath.Join(im.umoci, p))
		if err != nil {
			return failed, err
		}
		if !bytes.Equal(got, want) {
			return failed, fmt.Errorf("%s: %s: got %d bytes that differ from the source's %d", m.n.name, p, len(got), len(want))
		}
	}
	return failed, nil
}

// regularFiles lists the regular files of the source image, relative
// paths, sorted, larger than min bytes.
func (im *image) regularFiles(t testing.TB, min int64) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(im.umoci, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > min {
			rel, _ := filepath.Rel(im.umoci, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// peerBytes returns the stored chunk bytes the node's peer delivered from
// source ("cache", "peer" or "origin"), from its Prometheus metrics.
func (n *node) peerBytes(source string) int64 {
	n.c.t.Helper()
	return n.metric(`damselfly_peer_chunk_bytes_total{source="` + source + `"}`)
}

// metric reads one sample of the peer's /metrics; 0 if absent.
func (n *node) metric(series string) int64 {
	n.c.t.Helper()
	return scrape(n.c.t, n.proxy+"/metrics", series)
}

// scrape reads one sample of the Prometheus metrics at url; 0 if absent.
func scrape(t testing.TB, url, series string) int64 {
	t.Helper()
	var v float64
	samples(t, url, func(s string, f float64) {
		if s == series {
			v = f
		}
	})
	return int64(v)
}

// scrapeSum adds up every sample of metric name (all its label sets) at
// url.
func scrapeSum(t testing.TB, url, name string) float64 {
	t.Helper()
	var sum float64
	samples(t, url, func(s string, f float64) {
		if rest, ok := strings.CutPrefix(s, name); ok && (rest == "" || rest[0] == '{') {
			sum += f
		}
	})
	return sum
}

// samples calls f with each sample of the Prometheus metrics at url: its
// series (name and labels) and value.
func samples(t testing.TB, url string, f func(series string, v float64)) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("metrics at %s: %q: %v", url, line, err)
		}
		f(line[:sp], v)
	}
}
