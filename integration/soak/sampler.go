package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"damselfly/integration/harness"
)

// daemon is a process the sampler watches. metrics is its Prometheus
// endpoint over TCP; socket, for a mount daemon, the unix control socket
// that serves /metrics.
type daemon struct {
	Role, Node, Name string
	p                *harness.Proc
	metrics          string
	socket           string
}

// procSample is one process at one sample.
type procSample struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Node    string `json:"node,omitempty"`
	PID     int    `json:"pid"`
	RSS     int64  `json:"rss_bytes"`
	FDs     int    `json:"fds"`
	Threads int    `json:"threads"`
	// Goroutines is go_goroutines from the process's /metrics; -1 when it
	// does not export it.
	Goroutines int  `json:"goroutines"`
	Exited     bool `json:"exited,omitempty"`
}

// nodeSample is one node at one sample. Byte counters are cumulative.
type nodeSample struct {
	Node       string `json:"node"`
	CacheBytes int64  `json:"cache_bytes"` // entries on disk now
	// CacheMax is the largest size of the entries seen on disk since the
	// previous sample (the cache is measured every second); TmpMax the
	// largest size of the temporary files of writes in progress.
	CacheMax int64 `json:"cache_max_bytes"`
	TmpMax   int64 `json:"tmp_max_bytes"`
	Capacity int64 `json:"capacity_bytes"`
	// PeerBytes are chunk bytes the node's peer delivered, by source:
	// cache, peer (other nodes), origin (the registry).
	PeerBytes map[string]int64 `json:"peer_bytes"`
	// MountBytes are bytes the node's mounts returned to readers, by
	// source: memory, cache, shared, proxy (the node's peer), registry
	// (fallback, the peer bypassed).
	MountBytes map[string]int64 `json:"mount_bytes"`
	// MountBackend are stored bytes the node's mounts fetched, by source
	// (proxy, registry): chunks read whole, runs of adjacent chunks and
	// readahead, so more than the readers asked for.
	MountBackend map[string]int64 `json:"mount_backend_bytes"`
	// OriginRequests and OriginBytes are the ranged GETs the node's peer
	// sent to the registry and the bytes they returned.
	OriginRequests int64 `json:"origin_requests"`
	OriginBytes    int64 `json:"origin_bytes"`
	MountErrors    int64 `json:"mount_read_errors"`
	MountVerify    int64 `json:"mount_verify_failures"`
}

// snapshot is the whole run at one moment.
type snapshot struct {
	At        float64      `json:"at_seconds"` // since the readers started
	ReadsOK   int64        `json:"reads_ok"`
	Failed    int64        `json:"reads_failed"`
	Wrong     int64        `json:"reads_wrong"`
	Stuck     int          `json:"reads_stuck"` // in progress for over readTimeout
	ReadBytes int64        `json:"read_bytes"`
	MaxRead   float64      `json:"slowest_read_seconds"`
	Procs     []procSample `json:"procs"`
	Nodes     []nodeSample `json:"nodes"`
}

// cacheWatch measures every node cache's size on disk once a second and
// keeps the largest sizes seen since the last take.
type cacheWatch struct {
	mu  sync.Mutex
	max map[string]cacheSize
}

// cacheSize is a node cache on disk: the entries, which its capacity
// counts (rafs/cache/CACHE.md), and the temporary files of writes in
// progress, which it does not.
type cacheSize struct{ entries, tmp int64 }

func (a cacheSize) max(b cacheSize) cacheSize {
	return cacheSize{max(a.entries, b.entries), max(a.tmp, b.tmp)}
}

func (w *cacheWatch) run(ctx context.Context, nodes []*node) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for _, n := range nodes {
			w.observe(n.name, measureCache(n.cache))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *cacheWatch) observe(node string, size cacheSize) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.max == nil {
		w.max = map[string]cacheSize{}
	}
	w.max[node] = w.max[node].max(size)
}

// take returns the largest sizes seen for node since the last take and
// starts over from now.
func (w *cacheWatch) take(node string, now cacheSize) cacheSize {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.max == nil {
		w.max = map[string]cacheSize{}
	}
	m := w.max[node].max(now)
	w.max[node] = now
	return m
}

// measureCache sums the sizes of the regular files under dir, entries and
// temporary files apart. Files that vanish during the walk (evicted) are
// skipped.
func measureCache(dir string) cacheSize {
	var n cacheSize
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			n.tmp += info.Size()
		} else {
			n.entries += info.Size()
		}
		return nil
	})
	return n
}

// takeSample reads every daemon's /proc entries and metrics and every
// node's cache.
func takeSample(c *cluster, ds []daemon, watch *cacheWatch, stats *readStats, readers []*reader, since time.Time) snapshot {
	s := snapshot{
		At:      time.Since(since).Seconds(),
		ReadsOK: stats.ok.Load(), Failed: stats.failed.Load(), Wrong: stats.wrong.Load(),
		Stuck: stuck(readers, readTimeout), ReadBytes: stats.bytes.Load(),
		MaxRead: time.Duration(stats.maxNanos.Load()).Seconds(),
	}
	byNode := map[string]*nodeSample{}
	for _, n := range c.nodes {
		size := measureCache(n.cache)
		peak := watch.take(n.name, size)
		ns := &nodeSample{Node: n.name, CacheBytes: size.entries, CacheMax: peak.entries, TmpMax: peak.tmp, Capacity: n.capacity,
			PeerBytes: map[string]int64{}, MountBytes: map[string]int64{}, MountBackend: map[string]int64{}}
		byNode[n.name] = ns
	}
	for _, d := range ds {
		ps := procSample{Name: d.Name, Role: d.Role, Node: d.Node, PID: d.p.Pid(), Goroutines: -1, Exited: d.p.Exited()}
		if !ps.Exited {
			ps.RSS, ps.Threads = procStatus(ps.PID)
			ps.FDs = countFDs(ps.PID)
		}
		m, err := scrape(d)
		if err == nil {
			if g, ok := m["go_goroutines"]; ok {
				ps.Goroutines = int(g)
			}
		}
		if ns := byNode[d.Node]; ns != nil && err == nil {
			for series, v := range m {
				switch {
				case d.Role == "peer" && strings.HasPrefix(series, `damselfly_peer_chunk_bytes_total{`):
					ns.PeerBytes[label(series, "source")] += int64(v)
				case d.Role == "peer" && series == "damselfly_peer_origin_requests_total":
					ns.OriginRequests += int64(v)
				case d.Role == "peer" && series == "damselfly_peer_origin_bytes_total":
					ns.OriginBytes += int64(v)
				case d.Role == "mount" && strings.HasPrefix(series, `damselfly_mount_backend_bytes_total{`):
					ns.MountBackend[label(series, "source")] += int64(v)
				case d.Role == "mount" && strings.HasPrefix(series, `damselfly_mount_read_bytes_total{`):
					ns.MountBytes[label(series, "source")] += int64(v)
				case d.Role == "mount" && series == "damselfly_mount_read_errors_total":
					ns.MountErrors += int64(v)
				case d.Role == "mount" && series == "damselfly_mount_verify_failures_total":
					ns.MountVerify += int64(v)
				}
			}
		}
		s.Procs = append(s.Procs, ps)
	}
	for _, n := range c.nodes {
		s.Nodes = append(s.Nodes, *byNode[n.name])
	}
	return s
}

// procStatus returns VmRSS in bytes and the thread count of pid.
func procStatus(pid int) (rss int64, threads int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS": // "123456 kB"
			n, _ := strconv.ParseInt(f[0], 10, 64)
			rss = n << 10
		case "Threads":
			threads, _ = strconv.Atoi(f[0])
		}
	}
	return rss, threads
}

// countFDs counts the open file descriptors of pid.
func countFDs(pid int) int {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(es)
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads the daemon's Prometheus text metrics into series -> value,
// the series spelled as in the text (name{labels}).
func scrape(d daemon) (map[string]float64, error) {
	client, url := httpClient, d.metrics
	if d.socket != "" {
		sock := d.socket
		client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, "unix", sock)
			}}}
		defer client.CloseIdleConnections()
		url = "http://mount/metrics"
	}
	if url == "" {
		return nil, fmt.Errorf("%s has no metrics endpoint", d.Name)
	}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// label returns the value of label name in a series spelled name{k="v",...}.
func label(series, name string) string {
	_, rest, ok := strings.Cut(series, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}
