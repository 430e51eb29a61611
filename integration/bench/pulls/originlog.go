package main

import (
	"bufio"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// originBlob is what the origin's access log says it served of one
// blob in a run: how many GET requests, and the bytes of their bodies.
type originBlob struct {
	Digest   string `json:"digest"`
	Requests int    `json:"requests"`
	Bytes    int64  `json:"bytes"`
}

// accessLine matches a GET of a blob in docker-registry's access log
// (combined log format): the digest, the status and the body's bytes.
var accessLine = regexp.MustCompile(`"GET /v2/[^ ]*/blobs/(sha256:[0-9a-f]{64})[^ ]* HTTP/[0-9.]+" (\d{3}) (\d+)`)

// parseAccessLog sums the blob GETs with a 2xx status in r by digest,
// in digest order: whether the origin sent a blob more than once, and
// how much of it.
func parseAccessLog(r io.Reader) ([]originBlob, error) {
	byDigest := map[string]*originBlob{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := accessLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[2], "2") {
			continue
		}
		n, err := strconv.ParseInt(m[3], 10, 64)
		if err != nil {
			continue
		}
		b := byDigest[m[1]]
		if b == nil {
			b = &originBlob{Digest: m[1]}
			byDigest[m[1]] = b
		}
		b.Requests++
		b.Bytes += n
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]originBlob, 0, len(byDigest))
	for _, b := range byDigest {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	return out, nil
}
