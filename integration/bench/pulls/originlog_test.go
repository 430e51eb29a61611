package main

import (
	"strings"
	"testing"
)

func TestParseAccessLog(t *testing.T) {
	t.Parallel()
	a := "sha256:" + strings.Repeat("a", 64)
	b := "sha256:" + strings.Repeat("b", 64)
	log := strings.Join([]string{
		`10.1.0.3 - - [04/Dec/2026:18:44:10 +0000] "GET /v2/bench/pull/blobs/` + a + ` HTTP/1.1" 200 1000 "" "Go-http-client/1.1"`,
		`10.1.0.4 - - [04/Dec/2026:18:44:11 +0000] "GET /v2/bench/pull/blobs/` + a + ` HTTP/1.1" 206 500 "" "Go-http-client/1.1"`,
		`10.1.0.4 - - [04/Dec/2026:18:44:11 +0000] "HEAD /v2/bench/pull/blobs/` + b + ` HTTP/1.1" 200 0 "" "x"`,
		`10.1.0.4 - - [04/Dec/2026:18:44:11 +0000] "GET /v2/bench/pull/blobs/` + b + ` HTTP/1.1" 404 19 "" "x"`,
		`10.1.0.5 - - [04/Dec/2026:18:44:12 +0000] "GET /v2/bench/pull/blobs/` + b + ` HTTP/1.1" 200 7 "" "x"`,
		`10.1.0.5 - - [04/Dec/2026:18:44:12 +0000] "GET /v2/bench/pull/manifests/t HTTP/1.1" 200 1046 "" "x"`,
		`time="2026-12-04T18:45:18Z" level=warning msg="No HTTP secret provided"`,
	}, "\n")
	got, err := parseAccessLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []originBlob{{Digest: a, Requests: 2, Bytes: 1500}, {Digest: b, Requests: 1, Bytes: 7}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("blob %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
