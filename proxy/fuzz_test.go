package proxy

import (
	"strings"
	"testing"

	"damselfly/rafs/registry"
)

// A /v2/ path either parses into a route whose parts pass the checks
// the upstream requests rely on, or is refused with an OCI error code.
func FuzzParseV2(f *testing.F) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{"library/alpine/manifests/3.20", "a/b/blobs/" + d, "a/blobs/blobs/" + d, "a/tags/list",
		"a/referrers/" + d, "a/manifests/" + d, "../x/blobs/" + d, "a//b/manifests/x", "blobs/" + d, "", "/", "a/b/c/d/e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		rt, code, msg := parseV2(rest)
		if code != "" {
			if msg == "" || rt != (v2Route{}) {
				t.Fatalf("refused %q with code %s, message %q and route %+v", rest, code, msg, rt)
			}
			// quote keeps 128 bytes of the input, each at most 6 bytes
			// once JSON-escaped: the echo is bounded however long the
			// input.
			if len(msg) > 64+6*128 {
				t.Fatalf("error message of %d bytes echoes the input", len(msg))
			}
			return
		}
		if !registry.ValidRepo(rt.name) || strings.Contains(rt.name, "..") {
			t.Fatalf("%q: accepted repository %q", rest, rt.name)
		}
		switch rt.kind {
		case "blobs", "referrers":
			if !registry.ValidDigest(rt.ref) {
				t.Fatalf("%q: accepted digest %q", rest, rt.ref)
			}
		case "manifests":
			if !registry.ValidTag(rt.ref) && !registry.ValidDigest(rt.ref) {
				t.Fatalf("%q: accepted reference %q", rest, rt.ref)
			}
		case "tags":
			if rt.ref != "list" {
				t.Fatalf("%q: accepted tags/%q", rest, rt.ref)
			}
		default:
			t.Fatalf("%q: accepted kind %q", rest, rt.kind)
		}
		if got := rt.name + "/" + rt.kind + "/" + rt.ref; got != rest {
			t.Fatalf("%q parsed as %q", rest, got)
		}
	})
}

// A Range header parses into a non-empty range inside the blob, or is
// left to the origin.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-99", "bytes=10-", "bytes=-5", "bytes=990-5000", "bytes=5-4", "bytes=0-1,3-4",
		"bytes=-0", "bytes= 3-7", "items=0-1", "bytes=-9223372036854775808", "bytes=9223372036854775807-"} {
		f.Add(s, int64(1000))
	}
	f.Add("bytes=0-0", int64(1))
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size <= 0 {
			return // a blob of no bytes has no ranges to serve
		}
		off, end, ok := parseRange(h, size)
		if !ok {
			return
		}
		if off < 0 || end > size || off >= end {
			t.Fatalf("%q of %d bytes: [%d, %d)", h, size, off, end)
		}
	})
}
