package exchange

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

func TestFetch(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	raw := makeChunks(1, 3, 256<<10, false)
	comp := makeChunks(2, 3, 256<<10, true)
	all := append(slices.Clone(raw), comp...)
	srv := newServer(t, srvHost, newCache(t, all), DefaultServerConfig())

	col := &collector{t: t}
	res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{1}, chunksOf(all), col.deliver)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if res.Delivered != len(all) || len(res.Missing)+len(res.Bad)+len(res.Unanswered) != 0 {
		t.Fatalf("got %+v, want all %d delivered", res, len(all))
	}
	for i, tc := range all {
		if col.got[i] != tc.Digest {
			t.Fatalf("delivery %d: got %s, want %s (request order)", i, col.got[i], tc.Digest)
		}
	}
	var want int64
	for _, tc := range all {
		want += int64(len(tc.stored))
	}
	if res.Bytes != want {
		t.Errorf("got %d bytes, want %d", res.Bytes, want)
	}
	if st := srv.Stats(); st.ChunksSent != uint64(len(all)) || st.BytesSent != uint64(want) || st.Streams != 1 {
		t.Errorf("server stats %+v, want %d chunks, %d bytes, 1 stream", st, len(all), want)
	}
}

func TestFetchMissing(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	tcs := makeChunks(3, 6, 64<<10, true)
	held := []testChunk{tcs[0], tcs[2], tcs[5]}
	srv := newServer(t, srvHost, newCache(t, held), DefaultServerConfig())

	col := &collector{t: t}
	res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{1}, chunksOf(tcs), col.deliver)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if res.Delivered != 3 || len(col.got) != 3 {
		t.Fatalf("delivered %d (%d calls), want 3", res.Delivered, len(col.got))
	}
	want := []rafs.Chunk{tcs[1].Chunk, tcs[3].Chunk, tcs[4].Chunk}
	if !slices.Equal(res.Missing, want) {
		t.Fatalf("missing %v, want chunks 1, 3, 4", res.Missing)
	}
	if st := srv.Stats(); st.ChunksNotFound != 3 {
		t.Errorf("server counted %d not found, want 3", st.ChunksNotFound)
	}
}

// TestFetchOtherForm checks that a chunk cached in the other form (raw
// where the requester's blob has it compressed) is served and verified.
func TestFetchOtherForm(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	comp := makeChunks(4, 2, 128<<10, true)
	rawForm := make([]testChunk, len(comp))
	for i, tc := range comp {
		r := tc
		r.Flags, r.CompressedSize, r.stored = 0, r.Size, r.content
		rawForm[i] = r
	}
	newServer(t, srvHost, newCache(t, rawForm), DefaultServerConfig())

	var forms []rafs.Chunk
	res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{1}, chunksOf(comp), func(c rafs.Chunk, stored []byte) error {
		forms = append(forms, c)
		return (&collector{t: t}).deliver(c, stored)
	})
	if err != nil || res.Delivered != 2 {
		t.Fatalf("got %+v, %v; want 2 delivered", res, err)
	}
	for i, c := range forms {
		if c.Compressed() || c.CompressedSize != c.Size || c.CompressedOffset != comp[i].CompressedOffset {
			t.Errorf("delivery %d: got %+v, want the raw form at the requested offset", i, c)
		}
	}
}

func TestFetchCorrupt(t *testing.T) {
	t.Parallel()
	tcs := makeChunks(5, 4, 64<<10, true)
	for _, verify := range []bool{false, true} {
		name := map[bool]string{false: "server does not verify", true: "server verifies"}[verify]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srvHost, cli := pair(t)
			c := newCache(t, tcs)
			srv := newServer(t, srvHost, flipStore{Cache: c, flip: map[rafs.Digest]bool{tcs[1].Digest: true}}, func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = !verify; return c }())

			col := &collector{t: t}
			res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{1}, chunksOf(tcs), col.deliver)
			if verify {
				// The server catches it, drops the entry and says it does
				// not hold the chunk; the peer is not at fault.
				if err != nil || res.Delivered != 3 || !slices.Equal(res.Missing, []rafs.Chunk{tcs[1].Chunk}) {
					t.Fatalf("got %+v, %v; want 3 delivered and chunk 1 missing", res, err)
				}
				if c.Has(cache.KeyOf(tcs[1].Chunk)) {
					t.Error("corrupt entry still cached")
				}
				if st := srv.Stats(); st.Corrupt != 1 {
					t.Errorf("server counted %d corrupt, want 1", st.Corrupt)
				}
				return
			}
			if !errors.Is(err, ErrBadChunk) {
				t.Fatalf("got %v, want ErrBadChunk", err)
			}
			if !slices.Equal(res.Bad, []rafs.Chunk{tcs[1].Chunk}) {
				t.Fatalf("bad %v, want chunk 1", res.Bad)
			}
			if res.Delivered != 1 || !slices.Equal(col.got, []rafs.Digest{tcs[0].Digest}) {
				t.Fatalf("delivered %d %v, want only chunk 0", res.Delivered, col.got)
			}
			if !slices.Equal(res.Unanswered, chunksOf(tcs[2:])) {
				t.Fatalf("unanswered %v, want chunks 2 and 3", res.Unanswered)
			}
		})
	}
}

func TestFetchInvalidBatch(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	big := rafs.Chunk{Size: rafs.MaxChunkSize, CompressedSize: rafs.MaxChunkSize}
	tests := []struct {
		name   string
		chunks []rafs.Chunk
	}{
		{"empty", nil},
		{"too many", make([]rafs.Chunk, MaxChunksPerBatch+1)},
		{"too many bytes", []rafs.Chunk{big, big, big, big, big}},
		{"zero size", []rafs.Chunk{{CompressedSize: 1, Flags: rafs.ChunkCompressed}}},
		{"raw size mismatch", []rafs.Chunk{{Size: 10, CompressedSize: 9}}},
		{"unknown flag", []rafs.Chunk{{Size: 10, CompressedSize: 10, Flags: 8}}},
		{"two algorithms", []rafs.Chunk{{Size: 10, CompressedSize: 10, Flags: rafs.ChunkBlake3 | rafs.ChunkStoredDigest}}},
		{"oversized", []rafs.Chunk{{Size: rafs.MaxChunkSize + 1, CompressedSize: 10, Flags: rafs.ChunkCompressed}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{}, tt.chunks, nil)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("got %v, want ErrInvalidRequest", err)
			}
			if len(res.Unanswered) != len(tt.chunks) {
				t.Fatalf("got %d unanswered, want %d", len(res.Unanswered), len(tt.chunks))
			}
		})
	}
}

func TestDeliverError(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	tcs := makeChunks(6, 3, 64<<10, true)
	newServer(t, srvHost, newCache(t, tcs), DefaultServerConfig())
	stop := errors.New("stop")
	res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{}, chunksOf(tcs), func(rafs.Chunk, []byte) error { return stop })
	if !errors.Is(err, stop) || res.Delivered != 1 || len(res.Unanswered) != 2 {
		t.Fatalf("got %+v, %v; want the deliver error after 1 chunk", res, err)
	}
}

// TestStalledServer checks that a server that never answers cannot hold
// the client past its context's deadline.
func TestStalledServer(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	running, exited := make(chan struct{}, 1), make(chan struct{}, 1)
	done := make(chan struct{})
	srvHost.SetStreamHandler(ProtocolID, func(s network.Stream) {
		running <- struct{}{}
		io.Copy(io.Discard, s) // read the request, then answer nothing
		<-done
		s.Reset()
		exited <- struct{}{}
	})
	tcs := makeChunks(7, 1, 64<<10, true)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Fetch(ctx, cli, srvHost.ID(), rafs.Digest{}, chunksOf(tcs), func(rafs.Chunk, []byte) error {
		t.Error("deliver called")
		return nil
	})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	if took > 2*time.Second {
		t.Fatalf("returned after %v, want about 300ms", took)
	}
	if len(res.Unanswered) != 1 {
		t.Fatalf("got %+v, want the chunk unanswered", res)
	}
	select {
	case <-running:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalling handler never ran")
	}
	close(done)
	<-exited
}

// blake3Chunks turns tcs into chunks digested with BLAKE3.
func blake3Chunks(tcs []testChunk) []testChunk {
	out := slices.Clone(tcs)
	for i := range out {
		out[i].Flags |= rafs.ChunkBlake3
		out[i].Digest = rafs.DigestBlake3.Sum(out[i].content)
	}
	return out
}

// Chunks of a BLAKE3 image travel with their algorithm: the server
// (verifying here) and the client both check them by it. The same digest
// asked for under the other algorithm's flag is another chunk: the server
// answers that it holds the digest under the other algorithm (status 3),
// sends nothing and keeps its entry, and the client blames nobody.
func TestFetchBlake3(t *testing.T) {
	t.Parallel()
	srvHost, cli := pair(t)
	all := blake3Chunks(append(makeChunks(30, 2, 128<<10, false), makeChunks(31, 2, 128<<10, true)...))
	c := newCache(t, all)
	srv := newServer(t, srvHost, c, DefaultServerConfig())
	col := &collector{t: t}
	res, err := Fetch(t.Context(), cli, srvHost.ID(), rafs.Digest{3}, chunksOf(all), col.deliver)
	if err != nil || res.Delivered != len(all) {
		t.Fatalf("fetch: delivered %d of %d, %v", res.Delivered, len(all), err)
	}
	if st := srv.Stats(); st.ChunksSent != uint64(len(all)) {
		t.Errorf("server sent %d chunks, want %d", st.ChunksSent, len(all))
	}
	wrong := chunksOf(all[:2])
	wrong[0].Flags &^= rafs.ChunkBlake3
	for _, noVerify := range []bool{false, true} {
		h, cl := pair(t)
		s := newServer(t, h, c, func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = noVerify; return c }())
		res, err = Fetch(t.Context(), cl, h.ID(), rafs.Digest{3}, wrong, nil)
		if err != nil || res.Delivered != 1 || len(res.Missing) != 0 || len(res.Bad) != 0 ||
			len(res.OtherAlgo) != 1 || res.OtherAlgo[0].Digest != wrong[0].Digest {
			t.Errorf("no_verify=%v: a BLAKE3 chunk asked for as sha256: %+v, err %v; want it in OtherAlgo and the next delivered", noVerify, res, err)
		}
		if st := s.Stats(); st.ChunksSent != 1 || st.Corrupt != 0 {
			t.Errorf("no_verify=%v: server sent %d chunks and found %d corrupt, want 1 and 0", noVerify, st.ChunksSent, st.Corrupt)
		}
	}
	if !c.Has(cache.KeyOf(all[0].Chunk)) {
		t.Error("the flipped requests deleted the good entry")
	}
	// A server of the release before looked chunks up by digest alone
	// and, not verifying, sent its honest bytes: the client finds that
	// they verify under the other algorithm and does not take the
	// server for a liar.
	oldHost, cli3 := pair(t)
	newServer(t, oldHost, digestOnly{c: c}, func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = true; return c }())
	res, err = Fetch(t.Context(), cli3, oldHost.ID(), rafs.Digest{3}, wrong, nil)
	if err != nil || res.Delivered != 1 || len(res.Bad) != 0 || len(res.OtherAlgo) != 1 {
		t.Errorf("server looking up by digest alone: %+v, err %v; want the flipped chunk in OtherAlgo, not Bad", res, err)
	}
	// Bytes that verify under neither algorithm are bad, as ever.
	liarHost, cli4 := pair(t)
	newServer(t, liarHost, digestOnly{c: c, damage: true}, func() ServerConfig { c := DefaultServerConfig(); c.NoVerify = true; return c }())
	_, err = Fetch(t.Context(), cli4, liarHost.ID(), rafs.Digest{3}, wrong[:1], nil)
	if !errors.Is(err, ErrBadChunk) {
		t.Errorf("bad bytes: got %v, want ErrBadChunk", err)
	}
}

// digestOnly is a Store as servers of the release before had one: it
// finds a chunk by digest, whatever the algorithm asked for. It has no
// Has, so its server cannot answer status 3. With damage, it flips a bit
// of what it found under the other algorithm.
type digestOnly struct {
	c      *cache.Cache
	damage bool
}

func (s digestOnly) Get(k cache.Key, dst []byte) (cache.Meta, []byte, error) {
	m, b, err := s.c.Get(k, dst)
	if ok, other := otherAlgo(k); errors.Is(err, cache.ErrNotFound) && other {
		m, b, err = s.c.Get(ok, dst)
		if err == nil && s.damage {
			b[len(b)/2] ^= 0x40
		}
	}
	return m, b, err
}
