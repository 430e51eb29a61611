package main

import (
	"fmt"
	"strings"

	"damselfly/integration/harness"
)

// progressLine is one sample in a line, printed as the run goes.
func progressLine(s snapshot) string {
	var caches []string
	for _, n := range s.Nodes {
		caches = append(caches, fmt.Sprintf("%.1f", mib(n.CacheMax)))
	}
	peer := roleSum(s, "peer")
	mount := roleSum(s, "mount")
	return fmt.Sprintf("t=%4.0fs reads ok=%d failed=%d wrong=%d stuck=%d | peers rss=%.0fMiB fds=%d | mounts rss=%.0fMiB fds=%d | cache max MiB %s",
		s.At, s.ReadsOK, s.Failed, s.Wrong, s.Stuck, mib(peer.rss), peer.fds, mib(mount.rss), mount.fds, strings.Join(caches, "/"))
}

type sums struct {
	rss        int64
	fds, gor   int
	n          int
	gorMissing bool
}

// roleSum adds up the processes of a role (over every node).
func roleSum(s snapshot, role string) sums {
	var t sums
	for _, p := range s.Procs {
		if p.Role != role {
			continue
		}
		t.n++
		t.rss += p.RSS
		t.fds += p.FDs
		if p.Goroutines < 0 {
			t.gorMissing = true
		} else {
			t.gor += p.Goroutines
		}
	}
	return t
}

// perNode formats one figure of each node's process of role, "a/b/c".
func perNode(s snapshot, role string, f func(procSample) string) string {
	var parts []string
	for _, p := range s.Procs {
		if p.Role == role {
			parts = append(parts, f(p))
		}
	}
	return strings.Join(parts, "/")
}

// markdown renders the run: setup, the table over time, growth and the
// verdict.
func (res *result) markdown() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Soak run %s\n\n", res.Started.Format("2006-01-02 15:04 UTC"))
	w("%d nodes, %d readers, %s (warm-up %s, a sample every %s), chunks of %d KiB.\n\n",
		res.Config.Nodes, res.Config.Readers, res.Config.Duration, res.Config.Warmup, res.Config.Interval, res.Config.ChunkSize>>10)
	w("| image | files | file MiB | blobs | blob MiB |\n| --- | --- | --- | --- | --- |\n")
	for _, im := range res.Images {
		w("| %s | %d | %.1f | %d | %.1f |\n", im.Name, im.Files, mib(im.FileBytes), im.Blobs, mib(im.BlobBytes))
	}
	w("\nWorking set (distinct blobs, %d shared between images): %.1f MiB. Node cache capacity: %.1f MiB on every node; "+
		"bound with the default watermarks and %d writing processes per cache: %.1f MiB.\n\n",
		res.SharedBlob, mib(res.WorkingSet), mib(res.Capacity), 1+len(res.Images), mib(res.CacheBound))
	if res.Config.CacheDirect {
		w("The node caches were read and written with direct I/O (cache.direct_io), the peers keeping recent chunks in memory (cache.hot_bytes).\n\n")
	}

	w("Per-node figures are node0/node1/...; mount figures are sums over every mount daemon of the cluster. ")
	w("Cache MiB is the largest size of the cache's entries on disk seen since the previous row (measured every second). ")
	w("From peers / origin: chunk MiB the peers got from other peers and from the registry, cumulative.\n\n")
	w("| t (s) | reads ok | failed | wrong | MiB read | peer RSS MiB | peer fds | peer goroutines | mounts RSS MiB | mounts fds | mounts goroutines | scheduler RSS MiB / fds | cache MiB | from peers / origin MiB |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range res.Samples {
		m := roleSum(s, "mount")
		mg := fmt.Sprint(m.gor)
		if m.gorMissing {
			mg = "n/a"
		}
		sched := perNode(s, "scheduler", func(p procSample) string { return fmt.Sprintf("%.0f / %d", mib(p.RSS), p.FDs) })
		var caches []string
		var fromPeers, fromOrigin int64
		for _, n := range s.Nodes {
			caches = append(caches, fmt.Sprintf("%.1f", mib(n.CacheMax)))
			fromPeers += n.PeerBytes["peer"]
			fromOrigin += n.PeerBytes["origin"]
		}
		w("| %.0f | %d | %d | %d | %.0f | %s | %s | %s | %.0f | %d | %s | %s | %s | %.0f / %.0f |\n",
			s.At, s.ReadsOK, s.Failed, s.Wrong, mib(s.ReadBytes),
			perNode(s, "peer", func(p procSample) string { return fmt.Sprintf("%.0f", mib(p.RSS)) }),
			perNode(s, "peer", func(p procSample) string { return fmt.Sprint(p.FDs) }),
			perNode(s, "peer", func(p procSample) string { return fmt.Sprint(p.Goroutines) }),
			mib(m.rss), m.fds, mg, sched, strings.Join(caches, "/"), mib(fromPeers), mib(fromOrigin))
	}
	t := res.Totals
	w("\nTotals: %d reads (%.0f MiB) compared with the source, %d failed, %d wrong; slowest read %.2f s. "+
		"Largest node cache seen: %.1f MiB of entries (%.2f× capacity; over capacity in %d of %d node-intervals) plus at most %.2f MiB of writes in progress. The peers fetched %.0f MiB into their caches (%.1f× the capacity of all nodes).\n",
		t.ReadsOK, mib(t.ReadBytes), t.Failed, t.Wrong, t.MaxRead, mib(t.CacheMax), float64(t.CacheMax)/float64(max(res.Capacity, 1)),
		t.OverCapacity, len(res.Samples)*len(res.nodeNames), mib(t.TmpMax),
		mib(t.Fetched), float64(t.Fetched)/float64(max(res.Capacity*int64(max(len(res.nodeNames), 1)), 1)))
	if len(res.Samples) > 0 {
		last := res.Samples[len(res.Samples)-1]
		w("\nBytes the mounts returned, by source (MiB):")
		for _, n := range last.Nodes {
			w(" %s %s;", n.Node, sourceList(n.MountBytes))
		}
		w("\nStored bytes the mounts fetched, by source (MiB):")
		for _, n := range last.Nodes {
			w(" %s %s;", n.Node, sourceList(n.MountBackend))
		}
		w("\nChunk bytes the peers delivered to their mounts, by source (MiB):")
		for _, n := range last.Nodes {
			w(" %s %s;", n.Node, sourceList(n.PeerBytes))
		}
		w("\nRegistry requests (MiB) of each peer:")
		for _, n := range last.Nodes {
			w(" %s %d (%.1f);", n.Node, n.OriginRequests, mib(n.OriginBytes))
		}
		w("\n")
	}
	if len(res.Growth) > 0 {
		bad, worst := 0, growthRow{}
		worstRatio := -1.0
		for _, g := range res.Growth {
			if !g.OK {
				bad++
			}
			if r := (g.Last - g.First) / g.Allowed; r > worstRatio {
				worstRatio, worst = r, g
			}
		}
		w("\nGrowth check (median of the last third of the samples after warm-up against the first third): %d series judged, %d over their allowance. "+
			"Closest to its allowance: %s %s, %.0f → %.0f (allowed +%.0f).\n", len(res.Growth), bad, worst.Process, worst.Metric, worst.First, worst.Last, worst.Allowed)
	} else {
		w("\nGrowth check: too few samples after warm-up (want %d), not judged.\n", minGrowthSamples)
	}
	if len(res.Problems) == 0 {
		w("\n**PASS**\n")
	} else {
		w("\n**FAIL**:\n\n")
		for _, p := range res.Problems {
			w("- %s\n", p)
		}
	}
	if len(res.Slowest) > 0 {
		w("\nReads over 1 s: %d; over 10 s: %d. Slowest reads (start time UTC):\n\n", t.Over1s, t.Over10s)
		for _, r := range res.Slowest {
			w("- %.2f s at %s: %s\n", r.Seconds, r.At, r.Read)
		}
	}
	if res.StallDumps > 0 {
		w("\nReads ran over %s: the scheduler's view then is in logs/stall-N-peers.json and stall-N-origin.json (%d saved).\n",
			stallAfter, res.StallDumps)
	}
	if res.Warnings > 0 {
		w("\nDaemon log lines at WARN or ERROR: %d. The first:\n\n", res.Warnings)
		for _, l := range res.WarnLines {
			w("- `%s`\n", strings.ReplaceAll(l, "`", "'"))
		}
	}
	if len(res.Failures) > 0 {
		w("\nFirst failed reads:\n\n")
		for _, f := range res.Failures {
			w("- %s\n", f)
		}
	}
	return b.String()
}

func sourceList(m map[string]int64) string {
	var parts []string
	for _, k := range []string{"memory", "cache", "shared", "proxy", "registry", "peer", "origin"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, mib(v)))
		}
	}
	return strings.Join(parts, ", ")
}

// write puts soak.json and soak.md into dir.
func (res *result) write(dir string) error {
	return harness.WriteReport(dir, "soak", res, res.markdown())
}
