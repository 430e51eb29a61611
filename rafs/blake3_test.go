package rafs

import (
	"math/rand/v2"
	"testing"

	"lukechampine.com/blake3"
)

// TestBlake3SumMatchesLibrary compares the single-goroutine hash with the
// library's at every length around the chunk, group and tree boundaries
// and at random lengths up to 4 MiB.
func TestBlake3SumMatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 4<<20+3)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 63, 64, 65, len(data)}
	for _, edge := range []int{1024, 2048, 16 << 10, 32 << 10, 48 << 10, 64 << 10, 256 << 10, 1 << 20, 3 << 20} {
		for d := -2; d <= 2; d++ {
			lengths = append(lengths, edge+d)
		}
	}
	for range 200 {
		lengths = append(lengths, rng.IntN(len(data)+1))
	}
	for _, n := range lengths {
		if got, want := blake3Sum(data[:n]), Digest(blake3.Sum256(data[:n])); got != want {
			t.Fatalf("length %d: got %x, want %x", n, got, want)
		}
	}
	// Every length up to 40 chunks, from an unaligned start.
	for n := 0; n <= 40<<10; n += 1 + n/64 {
		if got, want := blake3Sum(data[7:7+n]), Digest(blake3.Sum256(data[7:7+n])); got != want {
			t.Fatalf("length %d at offset 7: got %x, want %x", n, got, want)
		}
	}
}

// TestBlake3KeyedSumMatchesLibrary checks the keyed hash that
// DigestStoredBlake3 gives compressed chunks against the library's keyed
// hasher, at lengths around the chunk, group and tree boundaries, and
// that StoredSum keys exactly the compressed form.
func TestBlake3KeyedSumMatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 2<<20+5)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	key := blake3Sum([]byte("damselfly rafs: zstd frame of a chunk, v1"))
	if kw := blake3KeyWords(key); kw != storedFrameKey {
		t.Fatalf("storedFrameKey %x, want the words of %x", storedFrameKey, key)
	}
	keyed := func(b []byte) Digest {
		h := blake3.New(32, key[:])
		h.Write(b)
		return Digest(h.Sum(nil))
	}
	lengths := []int{0, 1, 64, 1023, 1024, 1025, len(data)}
	for _, edge := range []int{16 << 10, 32 << 10, 64 << 10, 1 << 20} {
		for d := -1; d <= 1; d++ {
			lengths = append(lengths, edge+d)
		}
	}
	for range 50 {
		lengths = append(lengths, rng.IntN(len(data)+1))
	}
	for _, n := range lengths {
		if got, want := StoredSum(true, data[:n]), keyed(data[:n]); got != want {
			t.Fatalf("length %d: got %x, want %x", n, got, want)
		}
		if got, want := StoredSum(false, data[:n]), Digest(blake3.Sum256(data[:n])); got != want {
			t.Fatalf("raw, length %d: got %x, want %x", n, got, want)
		}
	}
}

// FuzzBlake3Sum checks the single-goroutine hash against the library's on
// arbitrary inputs.
func FuzzBlake3Sum(f *testing.F) {
	f.Add([]byte("damselfly"))
	f.Add(make([]byte, 17<<10))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := blake3Sum(b), Digest(blake3.Sum256(b)); got != want {
			t.Fatalf("length %d: got %x, want %x", len(b), got, want)
		}
	})
}

// BenchmarkBlake3Chunk compares the library's goroutine-per-16-KiB Sum256
// with blake3Sum on 1 MiB chunks: hashed on every P at once, as a busy
// node verifying chunks does, and one at a time.
func BenchmarkBlake3Chunk(b *testing.B) {
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 131)
	}
	for _, c := range []struct {
		name string
		sum  func([]byte) Digest
	}{
		{"library", func(p []byte) Digest { return blake3.Sum256(p) }},
		{"sequential", blake3Sum},
	} {
		b.Run(c.name+"/busy", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.SetParallelism(2) // more hashers than Ps, as on a loaded node
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.sum(data)
				}
			})
		})
		// One hash at a time on an idle machine: the latency of a lone
		// verification, where the library's goroutines may use the
		// other cores.
		b.Run(c.name+"/alone", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				c.sum(data)
			}
		})
	}
}
