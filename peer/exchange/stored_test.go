package exchange

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// storedChunks turns tcs into chunks named by BLAKE3 of their stored
// bytes (rafs.DigestStoredBlake3).
func storedChunks(tcs []testChunk) []testChunk {
	out := slices.Clone(tcs)
	for i := range out {
		out[i].Flags |= rafs.ChunkStoredDigest
		out[i].Digest = rafs.StoredSum(out[i].Compressed(), out[i].stored)
	}
	return out
}

// A blake3-stored chunk travels with flag bit 2 (and bit 0 when
// compressed), and decodes to itself; an entry with bits 1 and 2 both is
// refused, in a frame and before sending.
func TestRequestRoundTripStored(t *testing.T) {
	t.Parallel()
	tcs := storedChunks(append(makeChunks(40, 2, 64<<10, true), makeChunks(41, 1, 64<<10, false)...))
	chunks := chunksOf(tcs)
	frame := appendRequest(nil, rafs.Digest{9}, chunks)
	entry := func(i int) []byte {
		off := lengthPrefixSize + requestFixedSize + i*chunkEntrySize
		return frame[off : off+chunkEntrySize]
	}
	if f := entry(0)[16]; f != flagCompressed|flagStored {
		t.Errorf("compressed entry flags %#x, want %#x", f, flagCompressed|flagStored)
	}
	if f := entry(2)[16]; f != flagStored {
		t.Errorf("raw entry flags %#x, want %#x", f, flagStored)
	}
	req, err := readRequest(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chunks {
		c.Index, c.Blob = uint32(i), 0
		if req.chunks[i] != c {
			t.Errorf("chunk %d: got %+v, want %+v", i, req.chunks[i], c)
		}
	}
	entry(1)[16] = flagCompressed | flagBlake3 | flagStored
	if _, err := readRequest(bytes.NewReader(frame)); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("entry with both algorithm bits: got %v, want ErrInvalidRequest", err)
	}
	both := slices.Clone(chunks)
	both[0].Flags |= rafs.ChunkBlake3
	if err := checkBatch(both); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("checkBatch of a chunk with both algorithm bits: got %v, want ErrInvalidRequest", err)
	}
	if _, ok := otherAlgo(cache.KeyOf(chunks[0])); ok {
		t.Error("otherAlgo of a blake3-stored key: got one")
	}
	if _, ok := flipAlgo(chunks[0]); ok {
		t.Error("flipAlgo of a blake3-stored chunk: got one")
	}
}

// junkFrame is a compressed blake3-stored chunk whose stored bytes are
// not zstd: anything that decodes it fails, anything that hashes it
// passes.
func junkFrame(seed byte) testChunk {
	stored := bytes.Repeat([]byte{seed, 0x5a, 0xc3}, 3000)
	c := rafs.Chunk{Digest: rafs.StoredSum(true, stored), Flags: rafs.ChunkCompressed | rafs.ChunkStoredDigest,
		Size: 64 << 10, CompressedSize: uint32(len(stored))}
	return testChunk{Chunk: c, stored: stored}
}

// TestFetchStored: blake3-stored chunks, raw and compressed, go from a
// verifying server to a client and verify on both sides by their stored
// bytes alone: a frame that is no zstd but hashes right travels (no side
// decodes it). A flipped byte is a bad chunk, never "other algorithm";
// the same 32 bytes cached as BLAKE3 are not found, never offered.
func TestFetchStored(t *testing.T) {
	t.Parallel()
	all := storedChunks(append(makeChunks(42, 2, 128<<10, false), makeChunks(43, 2, 128<<10, true)...))
	all = append(all, junkFrame(1))
	c := newCache(t, all)
	for _, noVerify := range []bool{false, true} {
		srvHost, cli := pair(t)
		srv := newServer(t, srvHost, c, func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = noVerify; return c }())
		var got [][]byte
		res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{4}, chunksOf(all), func(ck rafs.Chunk, stored []byte) error {
			if ck.Flags != all[len(got)].Flags || ck.CompressedSize != all[len(got)].CompressedSize {
				t.Errorf("chunk %d delivered as %#x/%d, want %#x/%d", len(got), ck.Flags, ck.CompressedSize, all[len(got)].Flags, all[len(got)].CompressedSize)
			}
			got = append(got, stored)
			return nil
		})
		if err != nil || res.Delivered != len(all) {
			t.Fatalf("no_verify=%v: delivered %d of %d, %v", noVerify, res.Delivered, len(all), err)
		}
		for i, tc := range all {
			if !bytes.Equal(got[i], tc.stored) {
				t.Errorf("no_verify=%v: chunk %d: other bytes", noVerify, i)
			}
		}
		if st := srv.Stats(); st.Corrupt != 0 || st.ChunksSent != uint64(len(all)) {
			t.Errorf("no_verify=%v: server sent %d and found %d corrupt, want %d and 0", noVerify, st.ChunksSent, st.Corrupt, len(all))
		}
	}
	// Only the mount's decode finds the junk frame out.
	junk := all[len(all)-1]
	if err := rafs.DecodeChunk(junk.Chunk, junk.stored, make([]byte, junk.Size)); err == nil {
		t.Fatal("the junk frame decoded")
	}

	for _, i := range []int{0, 2} {
		liarHost, cli := pair(t)
		newServer(t, liarHost, flipStore{Cache: c, flip: map[rafs.Digest]bool{all[i].Digest: true}},
			func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = true; return c }())
		res, err := Fetch(t.Context(), cli, liarHost.ID(), rafs.Digest{4}, chunksOf(all[i:i+1]), nil)
		if !errors.Is(err, ErrBadChunk) || len(res.Bad) != 1 || len(res.OtherAlgo) != 0 {
			t.Errorf("chunk %d with a flipped byte: %+v, %v; want it Bad with ErrBadChunk", i, res, err)
		}
	}

	// The digest of a blake3-stored chunk held as a BLAKE3 entry.
	tcs := blake3Chunks(makeChunks(44, 1, 64<<10, false))
	c2 := newCache(t, tcs)
	asStored := tcs[0].Chunk
	asStored.Flags = asStored.Flags&^rafs.ChunkBlake3 | rafs.ChunkStoredDigest
	h, cl := pair(t)
	s := newServer(t, h, c2, DefaultServerConfig())
	res, err := Fetch(t.Context(), cl, h.ID(), rafs.Digest{4}, []rafs.Chunk{asStored}, nil)
	if err != nil || len(res.Missing) != 1 || len(res.OtherAlgo) != 0 || res.Delivered != 0 {
		t.Errorf("blake3-stored request for a BLAKE3 entry: %+v, %v; want it missing", res, err)
	}
	if st := s.Stats(); st.ChunksSent != 0 {
		t.Errorf("server sent %d chunks, want 0", st.ChunksSent)
	}
	if !c2.Has(cache.KeyOf(tcs[0].Chunk)) {
		t.Error("the BLAKE3 entry went")
	}
}

// A server that answers "other algorithm" for a blake3-stored chunk
// breaks the protocol: there is none.
func TestOtherAlgoForStoredIsProtocolError(t *testing.T) {
	t.Parallel()
	tcs := storedChunks(makeChunks(45, 1, 4096, false))
	stream := appendResponseHead(nil, StatusOK, "")
	stream = appendRecordHead(stream, chunkOtherAlgo, false, 0)
	var res FetchResult
	err := readResponse(bytes.NewReader(stream), chunksOf(tcs), nil, &res)
	if !errors.Is(err, ErrProtocol) || len(res.OtherAlgo) != 0 {
		t.Errorf("got %+v, %v; want ErrProtocol", res, err)
	}
	// The same answer for a BLAKE3 chunk is allowed.
	b3 := blake3Chunks(makeChunks(45, 1, 4096, false))
	res = FetchResult{}
	if err := readResponse(bytes.NewReader(stream), chunksOf(b3), nil, &res); err != nil || len(res.OtherAlgo) != 1 {
		t.Errorf("BLAKE3 chunk: got %+v, %v; want it in OtherAlgo", res, err)
	}
}
