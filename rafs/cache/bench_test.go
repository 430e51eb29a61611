package cache

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const benchChunk = 1 << 20

// BenchmarkPut writes distinct 1 MiB entries into a 256 MiB cache, so
// eviction runs as it would on a full node. The baseline writes the same
// bytes to plain files, deleting the one written 256 files before.
func BenchmarkPut(b *testing.B) {
	stored := content(1, benchChunk)
	b.Run("cache", func(b *testing.B) {
		c := openTest(b, func() Config { cc := Default(""); cc.Capacity = 256 << 20; return cc }())
		b.SetBytes(benchChunk)
		var i uint64
		for b.Loop() {
			if err := c.Put(fakeDigest(i), rawMeta(benchChunk), stored); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("baseline", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(benchChunk)
		var i int
		for b.Loop() {
			if err := os.WriteFile(fmt.Sprintf("%s/%d", dir, i), stored, 0o644); err != nil {
				b.Fatal(err)
			}
			if i >= 256 {
				os.Remove(fmt.Sprintf("%s/%d", dir, i-256))
			}
			i++
		}
	})
}

// BenchmarkGet reads 1 MiB entries (header and CRC checked, no digest)
// into a reused buffer: "cache" with direct I/O, from the device; "hot"
// the same with every entry in the cache's memory (Config.HotBytes). The
// baseline opens and reads the same files through the page cache with no
// checks.
func BenchmarkGet(b *testing.B) {
	const n = 64
	c := openTest(b, Default(""))
	hot := openTest(b, func() Config { cc := Default(""); cc.HotBytes = 4 * n * benchChunk; return cc }())
	for i := range uint64(n) {
		mustPut(b, c, fakeDigest(i), rawMeta(benchChunk), content(i, benchChunk))
		mustPut(b, hot, fakeDigest(i), rawMeta(benchChunk), content(i, benchChunk))
	}
	for _, r := range []struct {
		name string
		c    *Cache
	}{{"cache", c}, {"hot", hot}} {
		b.Run(r.name, func(b *testing.B) {
			b.SetBytes(benchChunk)
			buf := make([]byte, 0, benchChunk)
			var i uint64
			for b.Loop() {
				_, got, err := r.c.Get(fakeDigest(i%n), buf)
				if err != nil {
					b.Fatal(err)
				}
				buf = got
				i++
			}
		})
	}
	if s := hot.Stats(); s.HotHits == 0 || s.HotHits != s.Hits {
		b.Fatalf("not every read of the hot cache came from memory: %+v", s)
	}
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(benchChunk)
		buf := make([]byte, benchChunk)
		var i uint64
		for b.Loop() {
			f, err := os.Open(c.paths.entry(fakeDigest(i % n)))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.ReadAt(buf, headerSize); err != nil {
				b.Fatal(err)
			}
			f.Close()
			i++
		}
	})
}

// BenchmarkReadChunk reads and verifies (zstd, sha256) 1 MiB chunks.
func BenchmarkReadChunk(b *testing.B) {
	for _, compressed := range []bool{false, true} {
		b.Run(fmt.Sprintf("compressed=%v", compressed), func(b *testing.B) {
			c := openTest(b, Default(""))
			const n = 16
			chunks := make([]testChunk, n)
			for i := range chunks {
				chunks[i] = makeChunk(uint64(i), benchChunk, compressed)
				mustPut(b, c, KeyOf(chunks[i].ck), chunks[i].meta(), chunks[i].stored)
			}
			b.SetBytes(benchChunk)
			dst := make([]byte, benchChunk)
			var i int
			for b.Loop() {
				if err := c.ReadChunk(chunks[i%n].ck, dst); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkRescan scans a directory of 100,000 small entries, as eviction
// does under the directory lock.
func BenchmarkRescan(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	c := openTest(b, Default(dir))
	start := time.Now()
	var hb [headerSize]byte
	for i := range uint64(n) {
		d := fakeDigest(i)
		encodeHeader(&hb, header{key: d, meta: rawMeta(0)})
		path := c.paths.entry(d)
		if err := os.WriteFile(path, hb[:], 0o644); err != nil {
			os.MkdirAll(c.paths.shard(d), 0o755)
			if err := os.WriteFile(path, hb[:], 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("created %d entries in %v", n, time.Since(start))
	cpu0 := cpuTime(b)
	for b.Loop() {
		if err := c.Rescan(); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime(b) - cpu0
	if got := c.Stats().Entries; got != n {
		b.Fatalf("got %d entries, want %d", got, n)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/rescan")
	// CPU time (user and system, all threads) tells the cost apart from
	// waiting for a core on a busy machine.
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/rescan")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
