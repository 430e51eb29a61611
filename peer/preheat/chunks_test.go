package preheat

import (
	"archive/tar"
	"bytes"
	"context"
	"damselfly/rafs"
	"io"
	"math/rand/v2"
	"testing"
	"time"
)

// buildPrefetchImage builds a bootstrap of three files whose prefetch
// table names /b, which shares nothing with the others.
func buildPrefetchImage(t *testing.T) *rafs.Bootstrap {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, f := range []struct {
		name string
		size int
	}{{"a", 3 * rafs.MinChunkSize}, {"b", 2*rafs.MinChunkSize + 1}, {"c", rafs.MinChunkSize}} {
		data := randBytes(uint64(i+10), f.size)
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer := rafs.LayerSource{Name: "l", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}
	res, err := rafs.Build(t.Context(), []rafs.LayerSource{layer}, rafs.BuildOptions{ChunkSize: rafs.MinChunkSize, BlobDir: t.TempDir(), Prefetch: []string{"/b"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestListChunks(t *testing.T) {
	t.Parallel()
	b := buildPrefetchImage(t)
	count := func(bs []blobChunks) int {
		n := 0
		for _, pb := range bs {
			n += len(pb.chunks)
			for i := 1; i < len(pb.chunks); i++ {
				if pb.chunks[i].Ordinal <= pb.chunks[i-1].Ordinal {
					t.Errorf("blob %s: ordinals not ascending", pb.digest)
				}
			}
		}
		return n
	}
	all, err := listChunks(b, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := count(all), int(b.ChunkCount()); got != want {
		t.Errorf("all: got %d chunks, want %d", got, want)
	}
	pre, err := listChunks(b, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(pre); got != 3 {
		t.Errorf("prefetch only: got %d chunks, want 3 (those of /b)", got)
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		// Half random, half text, so some chunks compress and some not.
		if (i/4096)%2 == 0 {
			b[i] = byte(r.Uint32())
		} else {
			b[i] = "damselfly "[r.IntN(10)]
		}
	}
	return b
}
