package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"

	"damselfly/integration/harness"
)

// registry is the origin, a harness.Registry with its access log kept so
// that the blob requests of each measurement can be counted.
type registry struct {
	*harness.Registry
	host string
}

func startRegistry(ctx context.Context, dir string) (*registry, error) {
	r, err := harness.StartRegistry(ctx, harness.RegistryConfig{Dir: dir, AccessLog: true, Delete: true})
	if err != nil {
		return nil, err
	}
	return &registry{Registry: r, host: r.Host()}, nil
}

// logOffset is where the access log ends now.
func (r *registry) logOffset() int64 {
	st, err := os.Stat(r.Proc().Log())
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
	f, err := os.Open(r.Proc().Log())
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
