package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/sample"
	"damselfly/rafs/transport"
)

// Scenario 9: eight nodes read one image at once, every node the same
// files in the same order, so that they miss the same chunks together.
// The scheduler lets at most M of them (origin_fetchers, 2 here) fetch a
// chunk from the registry at a time and tells the others to wait for them
// and fetch it from them. Every node reaches the registry through its own
// gate, which records each blob GET's byte range and when it began and
// ended; from those the test counts, for every chunk of the image's
// blobs, the fetches from the registry in all and at the same time.
func TestEightNodesOriginFetchesBounded(t *testing.T) {
	const nodes, m = 8, 2
	c := newClusterWith(t, fmt.Sprintf("  origin_fetchers: %d\n", m))
	im := pushImage(t, c.reg, "eight", sample.Generate("src", sample.Options{Seed: 41, Scale: 0.15}), rafs.MinChunkSize)
	blobs := dataBlobs(t, im.ref(c.reg.host, "rafs"))
	files := im.regularFiles(t, 0)
	var ns []*node
	for i := range nodes {
		ns = append(ns, c.addNode(fmt.Sprintf("n%d", i), ""))
	}
	var ms []*mount
	for _, n := range ns {
		ms = append(ms, n.mount(im, ""))
	}
	for _, n := range ns {
		n.gate.record()
	}
	requests0 := scrapeSum(t, c.sched.admin+"/metrics", "damselfly_scheduler_requests_total")
	start := time.Now()
	res := make([]readResult, nodes)
	var wg sync.WaitGroup
	for i, mt := range ms {
		wg.Go(func() { res[i] = mt.readParallel(im, files, 4) })
	}
	wg.Wait()
	elapsed := time.Since(start)

	var fetches []blobFetch
	for _, n := range ns {
		fetches = append(fetches, n.gate.recorded()...)
	}
	var fromPeers, fromOrigin, unscheduled, direct int64
	for i, n := range ns {
		if res[i].err != nil || len(res[i].failed) > 0 || res[i].bad > 0 {
			t.Errorf("node %s: %d reads failed, %d files with wrong bytes, %v: %v", n.name, len(res[i].failed), res[i].bad, res[i].err, res[i].failed)
		}
		fromPeers += n.peerBytes("peer")
		fromOrigin += n.peerBytes("origin")
		unscheduled += n.metric("damselfly_peer_origin_requests_unscheduled_total")
		direct += int64(ms[i].status().Backend["registry"])
	}
	ranOut := scrape(t, c.sched.admin+"/metrics", "damselfly_scheduler_origin_turns_ran_out_total")
	requests := scrapeSum(t, c.sched.admin+"/metrics", "damselfly_scheduler_requests_total") - requests0
	t.Logf("measured: the scheduler answered %.0f requests while the nodes read, %.0f per node per second", requests, requests/nodes/elapsed.Seconds())

	var blobBytes int64
	for _, size := range blobs {
		blobBytes += size
	}
	counts := originCounts(fetches, blobs)
	var fetched, once, over int64
	var worst originSegment
	for _, s := range counts {
		n := s.end - s.off
		fetched += n * int64(s.total)
		if s.total == 1 {
			once += n
		}
		if s.total == 0 {
			t.Errorf("blob %s bytes [%d, %d) never came from the registry, yet every node read every file", s.blob, s.off, s.end)
		}
		if s.together > m {
			over += n
		}
		if s.together > worst.together {
			worst = s
		}
	}
	t.Logf("measured: %d nodes read %d files of %d MiB of blobs in %s: %d blob GETs reached the registry for %d bytes (%.2fx the blobs; %.0f%% of the bytes fetched once); at most %d at a time for one chunk (blob %s bytes [%d, %d), %d fetches in all); nodes got %d bytes from peers and %d from origin; %d origin requests without a turn, %d turns ran out, mounts read %d bytes from the registry directly",
		nodes, len(files), blobBytes>>20, elapsed.Round(time.Millisecond), len(fetches), fetched, float64(fetched)/float64(blobBytes),
		100*float64(once)/float64(blobBytes), worst.together, worst.blob, worst.off, worst.end, worst.total,
		fromPeers, fromOrigin, unscheduled, ranOut, direct)
	if over > 0 {
		t.Errorf("%d bytes of chunks were fetched from the registry by more than %d nodes at once (worst %d: blob %s bytes [%d, %d)); origin requests without a turn %d, turns that ran out %d, mount bytes straight from the registry %d",
			over, m, worst.together, worst.blob, worst.off, worst.end, unscheduled, ranOut, direct)
	}
	// Coordinated, the registry sends each chunk at most M times (more
	// only when a turn runs out); uncoordinated, eight nodes would fetch
	// it up to eight times.
	if fetched > m*blobBytes {
		t.Errorf("the registry sent %d bytes of blobs, %.2fx their %d bytes: want at most %dx", fetched, float64(fetched)/float64(blobBytes), blobBytes, m)
	}
	if fromPeers == 0 {
		t.Errorf("no node got a byte from another: the chunks did not spread")
	}
}

// dataBlobs returns the RAFS image's chunk blobs (not its bootstrap) and
// their sizes, from its manifest in the registry.
func dataBlobs(t *testing.T, ref string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := transport.ReadImage(ctx, r, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	man, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string]int64{}
	for _, l := range man.Layers {
		if n, err := strconv.ParseUint(l.Annotations[rafs.AnnotationBlobChunks], 10, 32); err == nil && n > 0 {
			blobs[l.Digest.String()] = l.Size
		}
	}
	if len(blobs) == 0 {
		t.Fatalf("%s: no chunk blob in the manifest", ref)
	}
	return blobs
}

// originSegment is a run of a blob's bytes that every recorded fetch
// covers either whole or not at all: total fetches covered it, at most
// together of them at once.
type originSegment struct {
	blob            string
	off, end        int64
	total, together int
}

// originCounts cuts each blob at every fetch's ends into segments and
// counts the fetches of each. Fetches of other blobs are left out. A
// peer fetches runs of whole chunks, so a segment is one or more whole
// chunks fetched alike, and its counts are those of each of its chunks.
func originCounts(fetches []blobFetch, blobs map[string]int64) []originSegment {
	var out []originSegment
	for blob, size := range blobs {
		var fs []blobFetch
		cuts := []int64{0, size}
		for _, f := range fetches {
			if f.blob != blob {
				continue
			}
			if f.end < 0 || f.end > size {
				f.end = size
			}
			if f.off >= f.end {
				continue
			}
			fs = append(fs, f)
			cuts = append(cuts, f.off, f.end)
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		for i := 0; i+1 < len(cuts); i++ {
			s := originSegment{blob: blob, off: cuts[i], end: cuts[i+1]}
			var spans []blobFetch
			for _, f := range fs {
				if f.off <= s.off && s.end <= f.end {
					spans = append(spans, f)
				}
			}
			s.total, s.together = len(spans), mostAtOnce(spans)
			out = append(out, s)
		}
	}
	return out
}

// mostAtOnce is the most fetches of spans in flight at the same instant;
// one that ended exactly when another began does not overlap it.
func mostAtOnce(spans []blobFetch) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, f := range spans {
		edges = append(edges, edge{f.start, 1}, edge{f.done, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// The counting itself: ranges cut blobs into segments, fetches that
// overlap in time count together, back-to-back ones do not, and fetches
// of other blobs or past a blob's end are clipped or left out.
func TestOriginCounts(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	blobs := map[string]int64{"a": 300}
	fetches := []blobFetch{
		{blob: "a", off: 0, end: 200, start: at(0), done: at(10)},
		{blob: "a", off: 100, end: 300, start: at(5), done: at(20)},  // overlaps the first on [100, 200)
		{blob: "a", off: 100, end: 200, start: at(20), done: at(30)}, // begins as the second ends
		{blob: "a", off: 250, end: -1, start: at(40), done: at(50)},  // to the end
		{blob: "b", off: 0, end: 100, start: at(0), done: at(100)},   // another blob
	}
	got := originCounts(fetches, blobs)
	want := []originSegment{
		{blob: "a", off: 0, end: 100, total: 1, together: 1},
		{blob: "a", off: 100, end: 200, total: 3, together: 2},
		{blob: "a", off: 200, end: 250, total: 1, together: 1},
		{blob: "a", off: 250, end: 300, total: 2, together: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for h, want := range map[string][2]int64{
		"bytes=10-19": {10, 20}, "bytes=10-": {10, -1}, "": {0, -1}, "bytes=0-1,5-6": {0, -1},
		"bytes=-5": {0, -1}, "bytes=9-3": {0, -1}, "items=1-2": {0, -1},
	} {
		if off, end := parseRange(h); off != want[0] || end != want[1] {
			t.Errorf("parseRange(%q) = %d, %d; want %v", h, off, end, want)
		}
	}
}
