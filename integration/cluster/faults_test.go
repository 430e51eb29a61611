package cluster

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/sample"
)

// Scenario 8: the registry misbehaves while two nodes read a whole image
// from it: slow (seconds per request), flapping (down and up again and
// again), answering 5xx to a share of requests, sending wrong bytes, or
// cutting bodies short. Node P reads through its peer, so the peer's
// origin fetch meets the fault; node D's peer is stopped, so its mount
// falls back to the registry and meets the fault itself. Each node's
// gate injects the fault, outside the code under test. No read fails and
// no wrong byte reaches a reader; wrong and short bodies are caught and
// fetched again.
func TestRegistryFaults(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p, d := c.addNode("p", ""), c.addNode("d", "")
	d.p.stop()
	// D's mounts get a proxy address that stays dead: the stopped peer's
	// port is free, and another test's peer that takes it would serve
	// D's reads (seen in CI: D read every chunk through "proxy").
	d.proxy = deadProxy(t)
	scenarios := []struct {
		name string
		f    fault
		flap time.Duration // alternate f.down for flap and up for 2*flap
	}{
		{name: "slow", f: fault{delay: 2 * time.Second}},
		// Cycles of 150 ms: the scenario's reads take 0.4-0.8 s since
		// chunk buffers are pooled, and must see the registry go down
		// at least twice (at 300 ms cycles they saw it once).
		{name: "flapping", f: fault{down: true}, flap: 50 * time.Millisecond},
		{name: "5xx", f: fault{every: 3, status: http.StatusInternalServerError}},
		{name: "wrong bytes", f: fault{every: 3, flip: true}},
		{name: "truncated", f: fault{every: 3, cut: true}},
	}
	// One image per scenario, so that every scenario reads from the
	// registry what no node holds yet.
	images := make([]*image, len(scenarios))
	for i := range scenarios {
		images[i] = pushImage(t, c.reg, fmt.Sprintf("faults%d", i), sample.Generate("src", sample.Options{Seed: uint64(20 + i), Scale: 0.05}), rafs.MinChunkSize)
	}
	// Scenarios run one after the other on the same cluster (not as
	// subtests: the harness fails the cluster's test).
	for i, sc := range scenarios {
		func() {
			im := images[i]
			files := im.regularFiles(t, 0)
			// Small runs, so that the fault meets many requests. The
			// deadline is longer than any fault lasts but far below the
			// default: the faults must not fail reads, and a flapping
			// registry gives a retry with backoff a third of its
			// attempts to lose.
			const cfg = "advanced:\n  amplify_io: 262144\n"
			mp, md := p.mountDeadline(im, "30s", cfg), d.mountDeadline(im, "30s", cfg)
			defer mp.unmount()
			defer md.unmount()
			gates := []*gate{p.gate, d.gate}
			var gets0, faulted0 [2]int64
			for j, g := range gates {
				gets0[j], faulted0[j] = g.blobGets.Load(), g.faulted.Load()
			}
			origin0, failures0 := p.peerBytes("origin"), p.metric("damselfly_peer_read_failures_total")
			stopFlap := func() int { return 0 }
			for _, g := range gates {
				g.trace()
			}
			if sc.flap > 0 {
				stopFlap = flap(gates, sc.f, sc.flap)
			} else {
				for _, g := range gates {
					g.set(sc.f)
				}
			}
			start := time.Now()
			var wg sync.WaitGroup
			res := make([]readResult, 2)
			for j, m := range []*mount{mp, md} {
				wg.Go(func() { res[j] = m.readParallel(im, files, 4) })
			}
			wg.Wait()
			elapsed := time.Since(start)
			flaps := stopFlap()
			for _, g := range gates {
				g.set(fault{})
			}

			for j, m := range []*mount{mp, md} {
				st := m.status()
				t.Logf("measured: %s: node %s: %d reads, %d failed, %d with wrong bytes; mount: %d verify failures, %d read errors, backend bytes %v; gate: %d blob GETs, %d faulted; %s",
					sc.name, m.n.name, len(files), len(res[j].failed), res[j].bad, st.Verify, st.Errors, st.Backend,
					gates[j].blobGets.Load()-gets0[j], gates[j].faulted.Load()-faulted0[j], elapsed.Round(time.Millisecond))
				if res[j].err != nil {
					t.Errorf("%s: node %s: %v", sc.name, m.n.name, res[j].err)
				}
				events := gates[j].untrace()
				if len(res[j].failed) > 0 || res[j].bad > 0 || st.Errors > 0 {
					t.Errorf("%s: node %s: %d reads failed, %d files with wrong bytes, %d read errors: %v", sc.name, m.n.name, len(res[j].failed), res[j].bad, st.Errors, res[j].failed)
					logEvents(t, m.n.name, start, events)
				}
				if gates[j].faulted.Load() == faulted0[j] {
					t.Errorf("%s: node %s: the gate injected no fault: the scenario tested nothing", sc.name, m.n.name)
				}
				if sc.f.flip && m == md && st.Verify == 0 {
					t.Errorf("node %s read the registry directly through wrong bytes with no verify failure", m.n.name)
				}
			}
			t.Logf("measured: %s: peer of node p: %d bytes from origin, %d read failures", sc.name, p.peerBytes("origin")-origin0, p.metric("damselfly_peer_read_failures_total")-failures0)
			if sc.flap > 0 {
				t.Logf("measured: %s: the registry went down %d times", sc.name, flaps)
				if flaps < 2 {
					t.Errorf("%s: the gates went down %d times while the nodes read, want at least 2", sc.name, flaps)
				}
			}
			// The direct path and the peer's origin path were both
			// exercised.
			if stP, stD := mp.status(), md.status(); stD.Backend["registry"] == 0 || stP.Backend["proxy"] == 0 {
				t.Errorf("%s: backend bytes: node p %v, node d %v: want p through its peer, d from the registry", sc.name, stP.Backend, stD.Backend)
			}
		}()
	}
}

// logEvents prints a gate's events, at their times since start, so that
// a failure shows which requests met which fault when.
func logEvents(t *testing.T, node string, start time.Time, events []gateEvent) {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\n  %8.3fs %s", e.at.Sub(start).Seconds(), e.what)
	}
	t.Logf("gate of node %s, %d events (at most %d kept):%s", node, len(events), maxEvents, b.String())
}

// flap switches the gates to f for period and back to no fault for
// twice that, again and again until the returned stop is called; stop
// returns how many times they went down.
func flap(gates []*gate, f fault, period time.Duration) (stop func() int) {
	done := make(chan struct{})
	var downs int
	var wg sync.WaitGroup
	wg.Go(func() {
		for down := true; ; down = !down {
			wait := 2 * period
			if down {
				downs++
				wait = period
			}
			for _, g := range gates {
				if down {
					g.set(f)
					g.note("down")
				} else {
					g.set(fault{})
					g.note("up")
				}
			}
			select {
			case <-done:
				return
			case <-time.After(wait):
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		for _, g := range gates {
			g.set(fault{})
		}
		return downs
	}
}

// readResult is what a read of files found: the failed reads, the files
// read with wrong bytes, and any other error.
type readResult struct {
	failed map[string]error
	bad    int
	err    error
}

// readParallel reads files with workers readers at once, comparing each
// with the source.
func (m *mount) readParallel(im *image, files []string, workers int) readResult {
	var (
		mu  sync.Mutex
		res = readResult{failed: map[string]error{}}
		wg  sync.WaitGroup
	)
	next := make(chan string)
	for range workers {
		wg.Go(func() {
			for f := range next {
				failed, err := m.readFilesErr(im, []string{f})
				mu.Lock()
				for k, v := range failed {
					res.failed[k] = v
				}
				if err != nil {
					res.bad++
					if res.err == nil {
						res.err = err
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, f := range files {
		next <- f
	}
	close(next)
	wg.Wait()
	return res
}

// deadProxy returns the URL of a listener on loopback that closes every
// connection it accepts, held until the test ends: a proxy address that
// no other process can take over.
func deadProxy(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}
