package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// registry is a docker-registry process (Debian's distribution v2) on a
// free port of 127.0.0.1 with filesystem storage, its access log kept
// so that the blob requests of each measurement can be counted.
type registry struct {
	host   string
	cmd    *exec.Cmd
	log    string // stdout and stderr: access log and errors
	exited chan struct{}
}

func startRegistry(ctx context.Context, dir string) (*registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var last error
	// The free port may be taken before the registry binds it; retry.
	for range 3 {
		r, err := tryRegistry(ctx, dir)
		if err == nil {
			return r, nil
		}
		last = err
	}
	return nil, last
}

func tryRegistry(ctx context.Context, dir string) (*registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	host := ln.Addr().String()
	ln.Close()
	config := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
http:
  addr: %q
`, filepath.Join(dir, "storage"), host)
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "registry.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command("docker-registry", "serve", config)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &registry{host: host, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(r.exited) }()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-r.exited:
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("docker-registry on %s exited: %s", host, lastLines(out, 10))
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("docker-registry on %s did not answer GET /v2/ within 15s", host)
		}
		resp, err := client.Get("http://" + host + "/v2/")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return r, nil
		}
	}
}

// stop ends the registry (SIGTERM, then SIGKILL after 5s) and waits.
func (r *registry) stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
}

// logOffset is where the access log ends now.
func (r *registry) logOffset() int64 {
	st, err := os.Stat(r.log)
	if err != nil {
		return 0
	}
	return st.Size()
}

// Requests summarises the blob GETs the registry served.
type Requests struct {
	Count  int   `json:"count"`
	Bytes  int64 `json:"bytes"`
	Median int64 `json:"median_bytes"`
	Max    int64 `json:"max_bytes"`
}

// accessLine matches the combined log format the registry writes:
// `... "GET /v2/REPO/blobs/sha256:... HTTP/1.1" 206 1048576 ...`.
var accessLine = regexp.MustCompile(`"GET (/v2/\S+/blobs/\S+) HTTP/[0-9.]+" (20[06]) (\d+)`)

// blobRequests reads the blob GETs logged since offset.
func (r *registry) blobRequests(since int64) (Requests, error) {
	f, err := os.Open(r.log)
	if err != nil {
		return Requests{}, err
	}
	defer f.Close()
	if _, err := f.Seek(since, io.SeekStart); err != nil {
		return Requests{}, err
	}
	var sizes []int64
	var q Requests
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := accessLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.ParseInt(m[3], 10, 64)
		sizes = append(sizes, n)
		q.Bytes += n
	}
	q.Count = len(sizes)
	if len(sizes) > 0 {
		slices.Sort(sizes)
		q.Median, q.Max = sizes[len(sizes)/2], sizes[len(sizes)-1]
	}
	return q, sc.Err()
}
