package rafs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sort"
	"strings"
	"testing"
)

// chunksByBlob decodes every chunk of b and groups them by blob digest,
// in offset order.
func chunksByBlob(t *testing.T, b *Bootstrap) map[Digest][]Chunk {
	t.Helper()
	out := map[Digest][]Chunk{}
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		bl, err := b.Blob(c.Blob)
		if err != nil {
			t.Fatal(err)
		}
		out[bl.Digest] = append(out[bl.Digest], c)
	}
	for _, cs := range out {
		sort.Slice(cs, func(i, j int) bool { return cs[i].CompressedOffset < cs[j].CompressedOffset })
	}
	return out
}

func TestChunkOrdinalsCountBlobChunksInOffsetOrder(t *testing.T) {
	base := makeTar(t, []tarEntry{
		{name: "big", data: randBytes(11, 7*MinChunkSize+5)},
		{name: "small", data: randBytes(12, 300)},
	})
	top := makeTar(t, []tarEntry{{name: "more", data: randBytes(13, 3*MinChunkSize)}})
	_, res := buildImage(t, BuildOptions{ChunkSize: MinChunkSize}, base, top)
	b, err := Decode(res.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for d, cs := range chunksByBlob(t, b) {
		for i, c := range cs {
			if c.Ordinal != uint32(i) {
				t.Errorf("blob %s: chunk at offset %d has ordinal %d, want %d", d, c.CompressedOffset, c.Ordinal, i)
			}
		}
	}

	// A second image built on the first as a chunk dictionary references
	// the dictionary's blobs with the dictionary's ordinals.
	_, res2 := buildImage(t, BuildOptions{ChunkSize: MinChunkSize, Dict: b},
		makeTar(t, []tarEntry{{name: "more-again", data: randBytes(13, 3*MinChunkSize)}, {name: "new", data: randBytes(14, 2*MinChunkSize)}}))
	b2, err := Decode(res2.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[Digest]uint32{}
	for _, cs := range chunksByBlob(t, b) {
		for _, c := range cs {
			want[c.Digest] = c.Ordinal
		}
	}
	reused := 0
	for _, cs := range chunksByBlob(t, b2) {
		for _, c := range cs {
			if o, ok := want[c.Digest]; ok {
				reused++
				if c.Ordinal != o {
					t.Errorf("dictionary chunk %s: ordinal %d, want the dictionary's %d", c.Digest, c.Ordinal, o)
				}
			}
		}
	}
	if reused != 3 {
		t.Errorf("got %d chunks reused from the dictionary, want 3", reused)
	}
}

func TestChunkOrdinalChecked(t *testing.T) {
	layer := makeTar(t, []tarEntry{{name: "f", data: randBytes(21, 3*MinChunkSize)}})
	_, res := buildImage(t, BuildOptions{ChunkSize: MinChunkSize}, layer)
	b, err := Decode(res.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Patch chunk 0's ordinal to the blob's chunk count (out of range),
	// then to chunk 1's (not increasing), and reseal the checksum.
	idx := bytes.Index(res.Bootstrap, b.record(secChunks, 0))
	if idx < 0 {
		t.Fatal("chunk record not found in the bootstrap")
	}
	for _, tc := range []struct {
		name    string
		ordinal uint32
	}{{"out of range", 3}, {"repeated", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			bad := append([]byte(nil), res.Bootstrap...)
			c0, _ := b.Chunk(0)
			c1, _ := b.Chunk(1)
			if c0.Ordinal != 0 || c1.Ordinal != 1 {
				t.Fatalf("got ordinals %d, %d, want 0, 1", c0.Ordinal, c1.Ordinal)
			}
			binary.LittleEndian.PutUint32(bad[idx+56:], tc.ordinal)
			reseal(bad)
			nb, err := Decode(bad, OpenOptions{})
			if err == nil {
				err = nb.Validate()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "ordinal") {
				t.Fatalf("got %v, want ErrCorrupt about the ordinal", err)
			}
		})
	}
}
