package fusemount

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"damselfly/rafs/cache"
)

// Status is what the control API reports about a mount and what
// `damselfly status` prints.
type Status struct {
	State      string            `json:"state"`
	Image      string            `json:"image"`
	Digest     string            `json:"digest,omitempty"`
	Mountpoint string            `json:"mountpoint"`
	Version    string            `json:"version"`
	PID        int               `json:"pid"`
	Started    time.Time         `json:"started"`
	Files      uint32            `json:"files"`
	Reads      map[string]uint64 `json:"reads"`      // by source
	ReadBytes  map[string]uint64 `json:"read_bytes"` // by source
	Backend    map[string]uint64 `json:"backend_bytes"`
	CacheHits  uint64            `json:"cache_hits"`
	CacheMiss  uint64            `json:"cache_misses"`
	HitRatio   float64           `json:"cache_hit_ratio"`
	Cache      *cache.Stats      `json:"cache,omitempty"`
	Prefetch   [2]int64          `json:"prefetch"` // done, total chunks
	InFlight   float64           `json:"fetches_in_flight"`
	Errors     uint64            `json:"read_errors"`
	Verify     uint64            `json:"verify_failures"`
	// Passthrough counts opens the kernel serves from a file copy.
	Passthrough uint64         `json:"passthrough_opens"`
	FileCopies  *FileCopyStats `json:"file_copies,omitempty"`
	Config      Config         `json:"config"` // Config.Redacted
	// ServedBy is "fuse", or "kernel" for a mount of a kernel image
	// (KernelImage, its path), whose reads never reach the daemon.
	ServedBy    string `json:"served_by"`
	KernelImage string `json:"kernel_image,omitempty"`
}

// FileCopyStats describe the file copy store as this daemon sees it.
type FileCopyStats struct {
	Dir      string `json:"dir"`
	Bytes    int64  `json:"bytes"`
	Copies   int    `json:"copies"`
	Capacity int64  `json:"capacity"`
	Evicted  int64  `json:"evicted"`
	Written  uint64 `json:"written"`
}

// Status snapshots the daemon's state and counters.
func (d *Daemon) Status(mountpoint string) Status {
	s := Status{State: d.state.get(), Image: d.image, Digest: d.digest, Mountpoint: mountpoint, Version: d.opts.Version,
		PID: os.Getpid(), Started: d.started, Files: d.boot.InodeCount(), Config: d.opts.Config.Redacted(),
		Reads: map[string]uint64{}, ReadBytes: map[string]uint64{}, Backend: map[string]uint64{},
		ServedBy: "fuse", KernelImage: d.kernelSource()}
	if s.KernelImage != "" {
		s.ServedBy = "kernel"
	}
	var written uint64
	fams, _ := d.metrics.Registry.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			label := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" {
					label = l.GetValue()
				}
			}
			v := value(m)
			switch f.GetName() {
			case "damselfly_mount_reads_total":
				s.Reads[label] = uint64(v)
			case "damselfly_mount_read_bytes_total":
				s.ReadBytes[label] = uint64(v)
			case "damselfly_mount_backend_bytes_total":
				s.Backend[label] = uint64(v)
			case "damselfly_mount_cache_hits_total":
				s.CacheHits = uint64(v)
			case "damselfly_mount_cache_misses_total":
				s.CacheMiss = uint64(v)
			case "damselfly_mount_fetches_in_flight":
				s.InFlight = v
			case "damselfly_mount_read_errors_total":
				s.Errors = uint64(v)
			case "damselfly_mount_verify_failures_total":
				s.Verify = uint64(v)
			case "damselfly_mount_passthrough_opens_total":
				s.Passthrough = uint64(v)
			case "damselfly_mount_file_copies_written_total":
				written = uint64(v)
			}
		}
	}
	if t := s.CacheHits + s.CacheMiss; t > 0 {
		s.HitRatio = float64(s.CacheHits) / float64(t)
	}
	if d.cache != nil {
		cs := d.cache.Stats()
		s.Cache = &cs
	}
	if d.copies != nil {
		b, n, e := d.copies.Stats()
		s.FileCopies = &FileCopyStats{Dir: d.copies.dir, Bytes: b, Copies: n, Capacity: d.copies.capacity, Evicted: e, Written: written}
	}
	if d.pf != nil {
		s.Prefetch = [2]int64{d.pf.done.Load(), d.pf.total.Load()}
	}
	return s
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// api is the control server on a unix socket.
type api struct {
	srv  *http.Server
	path string
	done chan struct{}
}

func startAPI(d *Daemon, path, mountpoint string) (*api, error) {
	if path == "" {
		path = SocketPath(mountpoint)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// A socket left by a daemon that died is in the way; a live one means
	// another daemon serves this mountpoint, which prepareMountpoint has
	// already ruled out.
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	os.Chmod(path, 0o600)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/daemon", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(d.Status(mountpoint))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{}))
	a := &api{path: path, done: make(chan struct{}), srv: &http.Server{Handler: mux,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("control API stopped", "err", err)
		}
	}()
	return a, nil
}

func (a *api) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := a.srv.Shutdown(ctx)
	<-a.done
	os.Remove(a.path)
	return err
}

// QueryStatus asks the daemon serving mountpoint for its status.
func QueryStatus(ctx context.Context, mountpoint, socket string) (*Status, error) {
	if socket == "" {
		socket = SocketPath(mountpoint)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", socket)
	}}, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://daemon/api/v1/daemon", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no mount daemon answers for %s (socket %s): %w", mountpoint, socket, err)
	}
	defer resp.Body.Close()
	var s Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("daemon status: %w", err)
	}
	return &s, nil
}
