package rafs

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"testing"
)

func TestPrefetchCovers(t *testing.T) {
	s, err := compilePrefetch([]string{
		"# a recorded startup trace",
		"",
		"  /usr/bin/python3  ",
		"etc/app",
		"/usr/lib/*.so",
		"/opt/./x/../y",
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"/usr/bin/python3":      true,
		"/usr/bin/python3.12":   false,
		"/usr/bin":              false,
		"/etc/app":              true,
		"/etc/app/conf.d/a":     true, // below a named directory
		"/etc/application":      false,
		"/usr/lib/libc.so":      true,
		"/usr/lib/libc.so/deep": true, // below a matching directory
		"/usr/lib/x/libc.so":    false,
		"/opt/y":                true,
		"/opt/x":                false,
		"/":                     false,
	} {
		if got := s.covers(p); got != want {
			t.Errorf("covers(%q) = %v, want %v", p, got, want)
		}
	}
	all, err := compilePrefetch([]string{"/"})
	if err != nil {
		t.Fatal(err)
	}
	if !all.covers("/any/file") {
		t.Error(`"/" does not cover every file`)
	}
	var none *prefetchSet
	if none.covers("/a") {
		t.Error("no patterns cover a file")
	}
	if _, err := compilePrefetch([]string{"/a/[b"}); err == nil {
		t.Error("a bad glob was accepted")
	}
}

// TestPrefetchBlob checks the prefetch blob: the prefetch files' chunks
// are all in it, it holds nothing else, and the image reads back whole.
func TestPrefetchBlob(t *testing.T) {
	cs := MinChunkSize
	lower := []tarEntry{
		{name: "app/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "lib/", typ: tar.TypeDir, mode: 0o755},
		{name: "app/big", data: randBytes(100, 3*cs+5)},      // hot, several chunks
		{name: "app/data", data: randBytes(101, 2*cs+7)},     // cold, several chunks
		{name: "etc/conf.d/", typ: tar.TypeDir, mode: 0o755}, // hot directory
		{name: "lib/libz.so", data: randBytes(102, 3000)},    // hot by glob
		{name: "lib/libz.a", data: randBytes(103, 3000)},
		{name: "app/link", typ: tar.TypeLink, link: "app/big"},
	}
	for i := range 40 {
		dir := []string{"app", "etc/conf.d", "lib"}[i%3]
		lower = append(lower, tarEntry{name: fmt.Sprintf("%s/f%02d", dir, i), data: randBytes(uint64(200+i), 900+37*i)})
	}
	upper := []tarEntry{
		{name: "app/f03", data: randBytes(300, 1500)}, // hot, replaces the lower one
		{name: "app/.wh.f06"},                         // a hot file deleted
		{name: "app/f99", data: randBytes(301, 2*cs)}, // cold
		{name: "etc/conf.d/new", data: randBytes(302, 700)},
	}
	patterns := []string{"/app/big", "/etc/conf.d", "/lib/*.so", "/app/f03", "/app/f06", "/app/f09"}
	hot, err := compilePrefetch(patterns)
	if err != nil {
		t.Fatal(err)
	}
	layers := [][]byte{makeTar(t, lower), makeTar(t, upper)}
	fsys, res := buildImage(t, BuildOptions{ChunkSize: uint32(cs), Prefetch: patterns}, layers...)
	b := fsys.b
	if res.PrefetchBlob < 0 || res.PrefetchBlob >= len(res.Blobs) {
		t.Fatalf("PrefetchBlob = %d with %d blobs", res.PrefetchBlob, len(res.Blobs))
	}
	if len(res.Blobs) != len(layers)+1 {
		t.Errorf("%d blobs, want one per layer and the prefetch blob", len(res.Blobs))
	}
	pb := uint32(res.PrefetchBlob)

	// Every chunk of a hot file is in the prefetch blob, no chunk of a
	// cold one is, and every file reads back as the layers say.
	want := map[string][]byte{}
	for _, l := range [][]tarEntry{lower, upper} {
		for _, e := range l {
			if e.typ == 0 {
				want[path.Clean("/"+e.name)] = e.data
			}
		}
	}
	delete(want, "/app/.wh.f06")
	delete(want, "/app/f06")
	want["/app/link"] = want["/app/big"]
	hotChunks, hotFiles := 0, 0
	for p, data := range want {
		in, err := b.LookupPath(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		isHot := hot.covers(p) || p == "/app/link" // a second name of a hot file
		if isHot {
			hotFiles++
		}
		for j := range in.DataCount {
			c, err := b.FileChunk(in, j)
			if err != nil {
				t.Fatal(err)
			}
			if (c.Blob == pb) != isHot {
				t.Errorf("%s chunk %d is in blob %d; prefetch blob %d, hot %v", p, j, c.Blob, pb, isHot)
			}
			if isHot {
				hotChunks++
			}
		}
		got, err := fs.ReadFile(fsys, p[1:])
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: content differs", p)
		}
	}
	blob, err := b.Blob(pb)
	if err != nil {
		t.Fatal(err)
	}
	if int(blob.ChunkCount) != res.Stats.PrefetchChunks || blob.ChunkCount == 0 {
		t.Errorf("prefetch blob has %d chunks, stats say %d", blob.ChunkCount, res.Stats.PrefetchChunks)
	}
	// 15 small hot files of a few KiB pack into one or two shared chunks.
	if int(blob.ChunkCount) > 4+2 {
		t.Errorf("prefetch blob has %d chunks for one 4-chunk file and 15 small ones", blob.ChunkCount)
	}

	// The prefetch table: pattern order, then path order; the deleted
	// file is gone, the hardlink's inode listed once.
	inos, err := b.Prefetch()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ino := range inos {
		for p := range want {
			if in, _ := b.LookupPath(p); in.Ino == ino && p != "/app/link" {
				got = append(got, p)
			}
		}
	}
	wantTable := []string{"/app/big"}
	for _, p := range []string{"/etc/conf.d/f01", "/etc/conf.d/f04", "/etc/conf.d/f07", "/etc/conf.d/f10", "/etc/conf.d/f13",
		"/etc/conf.d/f16", "/etc/conf.d/f19", "/etc/conf.d/f22", "/etc/conf.d/f25", "/etc/conf.d/f28", "/etc/conf.d/f31",
		"/etc/conf.d/f34", "/etc/conf.d/f37", "/etc/conf.d/new"} {
		wantTable = append(wantTable, p)
	}
	wantTable = append(wantTable, "/lib/libz.so", "/app/f03", "/app/f09")
	if !slices.Equal(got, wantTable) {
		t.Errorf("prefetch table\n got %v\nwant %v", got, wantTable)
	}
	if hotFiles != len(wantTable)+1 || hotChunks == 0 {
		t.Errorf("%d hot files (%d chunks)", hotFiles, hotChunks)
	}

	// Without patterns: one blob per layer, no prefetch blob. With them,
	// the output does not depend on the number of workers.
	if _, res := buildImage(t, BuildOptions{ChunkSize: uint32(cs)}, layers...); res.PrefetchBlob != -1 || len(res.Blobs) != len(layers) {
		t.Errorf("no patterns: PrefetchBlob %d, %d blobs", res.PrefetchBlob, len(res.Blobs))
	}
	for _, w := range []int{1, 3} {
		r, err := Build(context.Background(), layersOf(layers...), BuildOptions{ChunkSize: uint32(cs), Prefetch: patterns, Workers: w, BlobDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Bootstrap, res.Bootstrap) {
			t.Errorf("workers=%d: bootstrap differs", w)
		}
	}
}
