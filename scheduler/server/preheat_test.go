package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"damselfly/scheduler/preheatwire"
)

// TestPreheatAll preheats every chunk on three peers: each ends with the
// whole image in its cache, and the registry served about one copy.
func TestPreheatAll(t *testing.T) {
	t.Parallel()
	reg := newPreheatRegistry(t)
	img := pushPreheatImage(t, reg)
	c := startPreheatCluster(t, map[string]string{"zone": "a"}, map[string]string{"zone": "a"}, map[string]string{"zone": "b"})
	j := postPreheat(t, c.s, mustJSON(t, PreheatRequestJSON{Image: img.ref, All: true}))
	if len(j.Peers) != 3 {
		t.Fatalf("job has %d peers, want 3", len(j.Peers))
	}
	j = waitPreheat(t, c.s, j.ID)
	if j.State != preheatDone {
		t.Fatalf("job state %s, want done: %+v", j.State, j.Peers)
	}
	for _, p := range j.Peers {
		if p.State != preheatDone || p.ChunksDone != uint64(img.count()) || p.ChunksTotal != uint64(img.count()) || p.BytesDone != uint64(img.blobBytes) {
			t.Errorf("peer %+v: want done with %d chunks, %d bytes", p, img.count(), img.blobBytes)
		}
	}
	// Three peers, one copy from the registry give or take the odd chunk
	// fetched twice when an origin turn times out on a loaded machine.
	t.Logf("registry served %d chunk bytes for an image of %d", reg.rangeBytes.Load(), img.blobBytes)
	if got := reg.rangeBytes.Load(); got < img.blobBytes || got >= 2*img.blobBytes {
		t.Errorf("registry served %d chunk bytes, want about %d (one copy)", got, img.blobBytes)
	}
	reg.down.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i, d := range c.peers {
		n, err := readAllCached(ctx, d, reg, img)
		if err != nil || n != int64(img.count()) {
			t.Errorf("peer %d: %d of %d chunks from its cache (err %v)", i, n, img.count(), err)
		}
	}
	// Idempotent: a second job finds everything cached and reads nothing.
	j = waitPreheat(t, c.s, postPreheat(t, c.s, mustJSON(t, PreheatRequestJSON{Image: img.ref})).ID)
	if j.State != preheatDone || j.ChunksDone != uint64(3*img.count()) {
		t.Errorf("second job: %s with %d chunks, want done with %d", j.State, j.ChunksDone, 3*img.count())
	}
}

// TestPreheatSelection: prefetch-only, a label and a peer count pick
// what and where.
func TestPreheatSelection(t *testing.T) {
	t.Parallel()
	reg := newPreheatRegistry(t)
	img := pushPreheatImage(t, reg)
	c := startPreheatCluster(t, map[string]string{"zone": "a"}, map[string]string{"zone": "b"})
	fetched := func() []int64 {
		var out []int64
		for _, d := range c.peers {
			s := d.Node().Stats()
			out = append(out, s.OriginChunks+s.PeerChunks)
		}
		return out
	}

	t.Run("label and prefetch only", func(t *testing.T) {
		j := postPreheat(t, c.s, `{"image": "`+img.ref+`", "labels": {"zone": "b"}, "prefetch_only": true}`)
		if len(j.Peers) != 1 || j.Peers[0].Peer != c.peers[1].AddrInfo().ID.String() {
			t.Fatalf("targets %+v, want peer 1 (zone b) only", j.Peers)
		}
		j = waitPreheat(t, c.s, j.ID)
		if j.State != preheatDone || j.ChunksTotal != uint64(img.prefetch) {
			t.Fatalf("job %s with %d chunks, want done with the %d prefetch chunks", j.State, j.ChunksTotal, img.prefetch)
		}
		if got := fetched(); got[0] != 0 || got[1] != int64(img.prefetch) {
			t.Errorf("chunks fetched by peers: %v, want [0 %d]", got, img.prefetch)
		}
	})
	t.Run("one peer", func(t *testing.T) {
		j := postPreheat(t, c.s, `{"image": "`+img.ref+`", "peers": 1, "labels": {"zone": "a"}}`)
		if len(j.Peers) != 1 || j.Peers[0].Peer != c.peers[0].AddrInfo().ID.String() {
			t.Fatalf("targets %+v, want peer 0", j.Peers)
		}
		if j = waitPreheat(t, c.s, j.ID); j.State != preheatDone {
			t.Fatalf("job %s, want done: %+v", j.State, j.Peers)
		}
		if got := fetched(); got[0] != int64(img.count()) || got[1] != int64(img.prefetch) {
			t.Errorf("chunks fetched by peers: %v, want [%d %d]", got, img.count(), img.prefetch)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		for _, tt := range []struct {
			body string
			code int
		}{
			{`{"image": "oci:/etc"}`, http.StatusBadRequest},
			{`{"image": "` + img.ref + `", "peers": 2, "all": true}`, http.StatusBadRequest},
			{`{"image": "` + img.ref + `", "peers": -1}`, http.StatusBadRequest},
			{`{"image": "` + img.ref + `", "timeout": "forever"}`, http.StatusBadRequest},
			{`{"image": "` + img.ref + `", "unknown": 1}`, http.StatusBadRequest},
			{`{"image": "` + img.ref + `"} {}`, http.StatusBadRequest},
			{`{"image": "` + img.ref + `", "labels": {"zone": "nowhere"}}`, http.StatusConflict},
			{`{"image": "` + strings.Repeat("a", maxPreheatBody) + `"}`, http.StatusRequestEntityTooLarge},
		} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.s.AdminURL()+"/api/v1/preheat", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Errorf("POST %.80s: got %d, want %d", tt.body, resp.StatusCode, tt.code)
			}
		}
		do(t, http.MethodGet, c.s.AdminURL()+"/api/v1/preheat/nope", http.StatusNotFound)
		do(t, http.MethodDelete, c.s.AdminURL()+"/api/v1/preheat/nope", http.StatusNotFound)
		var list []PreheatJSON
		decode(t, do(t, http.MethodGet, c.s.AdminURL()+"/api/v1/preheat", http.StatusOK), &list)
		if len(list) != 2 {
			t.Errorf("listed %d jobs, want 2", len(list))
		}
	})
}

// TestPreheatCancel cancels a job while the registry holds the peers'
// fetches: the job and its peers end cancelled, and every peer stops.
func TestPreheatCancel(t *testing.T) {
	t.Parallel()
	reg := newPreheatRegistry(t)
	img := pushPreheatImage(t, reg)
	c := startPreheatCluster(t, nil, nil)
	reg.hold()
	j := postPreheat(t, c.s, mustJSON(t, PreheatRequestJSON{Image: img.ref}))
	poll(t, "fetches to reach the registry", func() bool { return reg.inGate.Load() > 0 })
	var got PreheatJSON
	decode(t, do(t, http.MethodDelete, c.s.AdminURL()+"/api/v1/preheat/"+j.ID, http.StatusOK), &got)
	if got.State != preheatCancelled || got.Finished == nil {
		t.Errorf("after DELETE: job %s, want cancelled and finished", got.State)
	}
	for _, p := range got.Peers {
		if p.State != preheatCancelled {
			t.Errorf("peer %s: %s %q, want cancelled", p.Peer, p.State, p.Message)
		}
	}
	// The peers' fetches end (the registry sees their requests go) and
	// their preheats stop, with the registry still holding.
	poll(t, "the peers to stop", func() bool {
		for _, d := range c.peers {
			if d.Preheater().Running() != 0 {
				return false
			}
		}
		return reg.inGate.Load() == 0
	})
	// DELETE of an ended job changes nothing.
	decode(t, do(t, http.MethodDelete, c.s.AdminURL()+"/api/v1/preheat/"+j.ID, http.StatusOK), &got)
	if got.State != preheatCancelled {
		t.Errorf("second DELETE: %s, want cancelled", got.State)
	}
}

// TestPreheatPeerDies stops a peer mid-job: it is marked failed and the
// other finishes.
func TestPreheatPeerDies(t *testing.T) {
	t.Parallel()
	reg := newPreheatRegistry(t)
	img := pushPreheatImage(t, reg)
	c := startPreheatCluster(t, nil, nil)
	reg.hold()
	j := postPreheat(t, c.s, mustJSON(t, PreheatRequestJSON{Image: img.ref}))
	poll(t, "both peers to fetch", func() bool {
		return c.peers[0].Preheater().Running() == 1 && c.peers[1].Preheater().Running() == 1 && reg.inGate.Load() > 0
	})
	dead := c.peers[1].AddrInfo().ID.String()
	c.stops[1]()
	reg.open()
	j = waitPreheat(t, c.s, j.ID)
	if j.State != preheatFailed {
		t.Errorf("job %s, want failed", j.State)
	}
	for _, p := range j.Peers {
		want := preheatDone
		if p.Peer == dead {
			want = preheatFailed
		}
		if p.State != want {
			t.Errorf("peer %s: %s %q, want %s", p.Peer, p.State, p.Message, want)
		}
	}
}

// TestPreheatOnlyFromItsSchedulers: a host that is not one of the peer's
// schedulers is refused.
func TestPreheatOnlyFromItsSchedulers(t *testing.T) {
	t.Parallel()
	c := startPreheatCluster(t, nil)
	h := newPeer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := h.Connect(ctx, c.peers[0].AddrInfo()); err != nil {
		t.Fatal(err)
	}
	st, err := h.NewStream(ctx, c.peers[0].AddrInfo().ID, preheatwire.ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Reset()
	_ = st.SetDeadline(time.Now().Add(20 * time.Second))
	if err := preheatwire.WriteFrame(st, &preheatwire.Request{Image: "docker://127.0.0.1:1/x:y"}); err != nil {
		t.Fatal(err)
	}
	m, err := preheatwire.ReadFrame(st)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := m.(*preheatwire.Result); !ok || r.OK || !strings.Contains(r.Message, "not a scheduler") {
		t.Errorf("got %#v, want a refusal", m)
	}
	if c.peers[0].Preheater().Running() != 0 {
		t.Error("a refused preheat runs")
	}
}
