package scheduler

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"damselfly/rafs"
)

// The scale the issue sizes the scheduler for.
const (
	scalePeers  = 1000
	scaleBlobs  = 200
	scaleChunks = 1000
)

var (
	scaleOnce  sync.Once
	scaleState *State
	scaleIDs   []string
	scaleDigs  []rafs.Digest
	scaleHeap  uint64        // bytes of heap the state holds, after GC
	scaleBuild time.Duration // time to register and announce everything
)

// buildScale returns a State with scalePeers peers each holding a random
// half of every one of scaleBlobs blobs of scaleChunks chunks, spread over
// 3 zones of 10 racks, one peer per host, and records the heap it holds
// and how long it took. It is built once per process.
func buildScale(b *testing.B) *State {
	scaleOnce.Do(func() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		s := newScale(b)
		scaleBuild = time.Since(start)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		scaleState, scaleHeap = s, after.HeapAlloc-before.HeapAlloc
	})
	return scaleState
}

// newScale builds a new State of buildScale's shape, the same every time.
func newScale(b *testing.B) *State {
	s, err := New(Default(), nil)
	if err != nil {
		b.Fatal(err)
	}
	if scaleDigs == nil {
		for i := range scaleBlobs {
			scaleDigs = append(scaleDigs, digest(fmt.Sprint("blob", i)))
		}
		for i := range scalePeers {
			scaleIDs = append(scaleIDs, fmt.Sprintf("12D3KooWpeer%04d", i))
		}
	}
	rng := newRand(42)
	bits := make(Bitset, words(scaleChunks))
	for i, id := range scaleIDs {
		info := PeerInfo{
			Addrs:          []string{fmt.Sprintf("/ip4/10.0.%d.%d/tcp/4001", i/250, i%250)},
			Source:         fmt.Sprintf("10.0.%d.%d", i/250, i%250),
			Labels:         labels(fmt.Sprint("zone", i%3), fmt.Sprint("rack", i%30), fmt.Sprint("host", i)),
			UploadCapacity: 100 << 20,
		}
		if err := s.Register(id, info, t0); err != nil {
			b.Fatal(err)
		}
		for _, d := range scaleDigs {
			for w := range bits {
				bits[w] = rng.Uint64()
			}
			bits[len(bits)-1] &= 1<<(scaleChunks%64) - 1
			if _, err := s.AnnounceFull(id, d, bits, t0); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s
}

// rssBytes returns the process's resident set size, or 0 if unknown.
func rssBytes() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// BenchmarkScaleMemory reports the heap the scale state holds after GC,
// the process RSS, and how long registering every peer and announcing
// every holding in full (200,000 AnnounceFull calls) took.
func BenchmarkScaleMemory(b *testing.B) {
	s := buildScale(b)
	for range b.N {
	}
	st := s.Stats()
	b.ReportMetric(float64(scaleHeap)/(1<<20), "heap-MiB")
	b.ReportMetric(rssBytes()/(1<<20), "rss-MiB")
	b.ReportMetric(float64(st.Holdings), "holdings")
	b.ReportMetric(scaleBuild.Seconds(), "build-s")
}

// BenchmarkScaleParents runs parent queries against the scale state from
// 1 and 2 goroutines, for runs of 1, 16 and 128 adjacent chunks (a mount's
// merged miss) and a whole blob, reporting queries/s and latency
// percentiles over all queries. "report" variants have the requester
// report on every assignment after the query, as peers do, so the load
// accounting stays at its steady state; the time includes the reports.
// "sample=all" variants look at every holder (Config.ParentSample 0),
// the baseline for the default sample. Every run starts from a new state
// (built in about 0.15 s, untimed), so the leases one variant leaves do
// not load the next.
func BenchmarkScaleParents(b *testing.B) {
	for _, sample := range []int{Default().ParentSample, 0} {
		for _, report := range []bool{false, true} {
			for _, g := range []int{1, 2} {
				for _, n := range []int{1, 16, 128, 1000} {
					name := fmt.Sprintf("goroutines=%d/chunks=%d", g, n)
					if report {
						name += "/report"
					}
					if sample == 0 {
						name += "/sample=all"
					}
					b.Run(name, func(b *testing.B) {
						s := newScale(b)
						s.cfg.ParentSample = sample
						benchQueries(b, s, g, n, report)
					})
				}
			}
		}
	}
}

func benchQueries(b *testing.B, s *State, goroutines, n int, report bool) {
	lat := make([][]time.Duration, goroutines)
	per := b.N/goroutines + 1
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range goroutines {
		lat[g] = make([]time.Duration, 0, per)
		wg.Go(func() {
			rng := newRand(uint64(g) + 7)
			chunks := make([]uint32, n)
			for i := range per {
				req := scaleIDs[rng.IntN(scalePeers)]
				blob := scaleDigs[rng.IntN(scaleBlobs)]
				lo := uint32(rng.IntN(scaleChunks - n + 1))
				for k := range chunks {
					chunks[k] = lo + uint32(k)
				}
				now := t0.Add(time.Duration(i) * time.Microsecond)
				t := time.Now()
				a, err := s.Parents(req, blob, chunks, now)
				if err != nil {
					b.Error(err)
					return
				}
				if report {
					for _, p := range a.Parents {
						if _, err := s.Report(req, p.ID, Outcome{Blob: blob, OK: true, Bytes: 1 << 20, Duration: 20 * time.Millisecond}, now); err != nil {
							b.Error(err)
							return
						}
					}
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "queries/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(pct(0.999), "p99.9-µs")
}
