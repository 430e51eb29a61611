package peer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	lpeer "github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"damselfly/peer/exchange"
	dhost "damselfly/peer/host"
	"damselfly/peer/plain"
	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/piece"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/registry"
	"damselfly/rafs/route"
	"damselfly/scheduler"
)

// plainRegistry is go-containerregistry's in-process registry that counts
// the body bytes of the blob GETs it answers.
type plainRegistry struct {
	srv       *httptest.Server
	blobBytes atomic.Int64
}

func newPlainRegistry(t testing.TB) *plainRegistry {
	r := &plainRegistry{}
	inner := gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			w = countingWriter{w, &r.blobBytes}
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *plainRegistry) push(t testing.TB, repo string, data []byte) rafs.Digest {
	t.Helper()
	ref, err := name.NewRepository(strings.TrimPrefix(r.srv.URL, "http://")+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(ref, static.NewLayer(data, types.OCILayer)); err != nil {
		t.Fatalf("push blob: %v", err)
	}
	return sha256.Sum256(data)
}

// mirrorNode is a peer with its HTTP mirror in front of a plainRegistry.
type mirrorNode struct {
	*node
	url string
}

// newMirrorNode starts a peer whose exchange serves from wrap(cache) (the
// cache itself if wrap is nil, without the server's own check so that a
// wrapped store's bad bytes reach the requester) and its mirror, with the
// registry as default origin.
func newMirrorNode(t testing.TB, key string, st *scheduler.State, reg *plainRegistry, wrap func(*cache.Cache) exchange.Store, edit ...func(*NodeConfig)) *mirrorNode {
	t.Helper()
	hc := dhost.Loopback(filepath.Join(t.TempDir(), "identity.key"), key)
	hc.DialTimeout = 5 * time.Second
	h, err := dhost.New(t.Context(), hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, err := cache.Open(cache.Default(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var store exchange.Store = c
	if wrap != nil {
		store = wrap(c)
	}
	scfg := exchange.DefaultServerConfig()
	scfg.NoVerify = wrap != nil
	srv, err := exchange.NewServer(h, store, scfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ucfg := registry.Default()
	ucfg.DefaultRegistry = reg.srv.URL
	ucfg.Timeout = 10 * time.Second
	up, err := registry.New(ucfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	cfg := testConfig()
	cfg.PieceSize = piece.MinSize
	for _, e := range edit {
		e(&cfg)
	}
	nd, err := NewNode(cfg, h, c, newRouter(t, st, h), up, testLog())
	if err != nil {
		t.Fatal(err)
	}
	n := &node{h: h, cache: c, srv: srv, router: nd.router.(*router), Node: nd}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- nd.Run(ctx) }()
	pcfg := proxy.Default()
	pcfg.Listen = "127.0.0.1:0"
	pcfg.ShutdownTimeout = 5 * time.Second
	ps, err := proxy.New(pcfg, nd, up, prometheus.NewRegistry(), testLog(), proxy.WithBlobs(nd.Plain()))
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Listen(); err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- ps.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-serveDone; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := nd.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	return &mirrorNode{node: n, url: ps.URL()}
}

// get fetches a blob through the mirror; rng may be empty.
func (m *mirrorNode) get(t testing.TB, repo string, blob rafs.Digest, rng string) (int, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, m.url+"/v2/"+repo+"/blobs/"+blob.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func (m *mirrorNode) mustGet(t testing.TB, repo string, blob rafs.Digest, rng string, want []byte, wantCode int) {
	t.Helper()
	code, body, err := m.get(t, repo, blob, rng)
	if err != nil {
		t.Fatalf("GET %s (range %q): %v", blob, rng, err)
	}
	if code != wantCode || !bytes.Equal(body, want) {
		t.Fatalf("GET %s (range %q): got %d with %d bytes (equal %v), want %d with %d bytes",
			blob, rng, code, len(body), bytes.Equal(body, want), wantCode, len(want))
	}
}

// Scenario: node A pulls a plain layer through its mirror from the
// origin; node B then gets it whole, and a range of it, from A's pieces
// without a blob byte from the registry.
func TestPlainBlobGoesP2P(t *testing.T) {
	t.Parallel()
	key, st, reg := clusterKey(t), newScheduler(t), newPlainRegistry(t)
	data := randBytes(41, 17*piece.MinSize+123)
	blob := reg.push(t, "test/plain", data)
	a := newMirrorNode(t, key, st, reg, nil)
	b := newMirrorNode(t, key, st, reg, nil)

	a.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if got := reg.blobBytes.Load(); got != int64(len(data)) {
		t.Fatalf("registry sent %d blob bytes for A's pull, want %d", got, len(data))
	}
	if ann, _, _ := a.router.snapshot(); len(ann[plain.Key(blob)]) != 18 {
		t.Fatalf("A announced %d pieces, want 18", len(ann[plain.Key(blob)]))
	}
	before := reg.blobBytes.Load()
	b.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if got := reg.blobBytes.Load() - before; got != 0 {
		t.Fatalf("registry sent %d blob bytes for B's pull, want 0", got)
	}
	if s := b.Stats(); s.PeerBytes != int64(len(data)) {
		t.Fatalf("B got %d bytes from peers, want %d", s.PeerBytes, len(data))
	}
	// B checked the whole blob: it now serves ranges from its pieces, and
	// the table to others.
	for _, rng := range []struct {
		h        string
		off, end int
	}{{"bytes=100000-300000", 100000, 300001}, {"bytes=-10", len(data) - 10, len(data)}, {"bytes=65536-", 65536, len(data)}} {
		b.mustGet(t, "test/plain", blob, rng.h, data[rng.off:rng.end], http.StatusPartialContent)
	}
	if got := reg.blobBytes.Load() - before; got != 0 {
		t.Fatalf("registry sent %d blob bytes for B's ranges, want 0", got)
	}
	if _, ok := b.Plain().PieceTable(t.Context(), registry.Ref{}, blob, false); !ok {
		t.Fatal("B does not serve the table after checking the blob")
	}
	// A second whole-blob pull on B comes from its own pieces, each
	// checked against its checked table, not from the registry.
	b.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if got := reg.blobBytes.Load() - before; got != 0 {
		t.Fatalf("registry sent %d blob bytes for B's second pull, want 0", got)
	}
	// A blob nobody holds, with a range, passes through.
	other := randBytes(42, 3000)
	od := reg.push(t, "test/plain", other)
	b.mustGet(t, "test/plain", od, "bytes=10-19", other[10:20], http.StatusPartialContent)
}

// Scenario: the registry and the scheduler are down, and node B, which
// never pulled the blob nor heard of its holders, is connected to A,
// which holds it: B's mirror serves the blob from A's pieces (the table
// from a peer it is connected to), not a 502 from the failed pass-through.
func TestPlainBlobFromConnectedPeerInOutage(t *testing.T) {
	t.Parallel()
	key, st, reg := clusterKey(t), newScheduler(t), newPlainRegistry(t)
	data := randBytes(43, 5*piece.MinSize+77)
	blob := reg.push(t, "test/plain", data)
	a := newMirrorNode(t, key, st, reg, nil)
	b := newMirrorNode(t, key, st, reg, nil)
	a.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	// B's mirror has asked the registry about the blob for this client
	// (a HEAD, as clients send before a GET): the verdict that lets it
	// serve the blob to the client through the outage (auth_stale).
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, b.url+"/v2/test/plain/blobs/"+blob.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD of the blob through B: %d", resp.StatusCode)
	}
	reg.srv.Close()
	b.router.down.Store(true)
	if err := b.h.Connect(t.Context(), lpeer.AddrInfo{ID: a.h.ID(), Addrs: a.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	b.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if s := b.Stats(); s.PeerBytes != int64(len(data)) {
		t.Errorf("B got %d bytes from peers, want %d", s.PeerBytes, len(data))
	}
}

// flipPieces serves a cache with one byte flipped in the pieces it names.
type flipPieces struct {
	*cache.Cache
	bad map[rafs.Digest]bool // by SHA-256 digest, as pieces are
}

func (s flipPieces) Get(d cache.Key, dst []byte) (cache.Meta, []byte, error) {
	m, b, err := s.Cache.Get(d, dst)
	if err == nil && s.bad[d.Digest] {
		b[len(b)/3] ^= 0x20
	}
	return m, b, err
}

// A peer serving a wrong piece is avoided; the piece comes from the origin
// (a ranged GET, checked against the table) and the blob is intact.
func TestPlainBlobCorruptPiece(t *testing.T) {
	t.Parallel()
	key, st, reg := clusterKey(t), newScheduler(t), newPlainRegistry(t)
	data := randBytes(43, 9*piece.MinSize+7)
	blob := reg.push(t, "test/plain", data)
	bad := map[rafs.Digest]bool{sha256.Sum256(data[5*piece.MinSize : 6*piece.MinSize]): true}
	a := newMirrorNode(t, key, st, reg, func(c *cache.Cache) exchange.Store { return flipPieces{c, bad} })
	b := newMirrorNode(t, key, st, reg, nil)

	a.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	before := reg.blobBytes.Load()
	b.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if !b.eng.Avoided(a.h.ID()) {
		t.Fatalf("B does not avoid A after a bad piece; B %+v, registry %d", b.Stats(), reg.blobBytes.Load()-before)
	}
	if got := reg.blobBytes.Load() - before; got <= 0 || got >= int64(len(data)) {
		t.Fatalf("registry sent %d blob bytes for B, want some (the pieces after the bad one) but not the blob", got)
	}
}

// A peer whose table does not give the blob (its pieces verify against
// it, the whole does not): the client never gets the whole wrong blob, B
// drops every piece read through the table and avoids and reports the
// peer, and the client's retry is served, intact, from the origin.
func TestPlainBlobLyingTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		size int
	}{
		// Several pieces: all but the last were sent when the digest
		// fails, so the transfer is cut short.
		{"several pieces", 6*piece.MinSize + 99},
		// One piece: nothing was sent yet, so the same request is served
		// from the origin.
		{"one piece", piece.MinSize - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lyingTable(t, tc.size)
		})
	}
}

func lyingTable(t *testing.T, size int) {
	key, st, reg := clusterKey(t), newScheduler(t), newPlainRegistry(t)
	data := randBytes(uint64(44+size), size)
	blob := reg.push(t, "test/plain", data)
	// M claims a table for the blob made from other bytes of the same
	// size (kept on its disk, as if it had checked it), and holds those
	// pieces.
	fake := randBytes(45, len(data))
	bld, err := piece.NewBuilder(sha256.Sum256(fake), piece.MinSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	bld.Write(fake)
	ft, err := bld.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ft.Blob = blob
	mdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mdir, "piece-tables"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mdir, "piece-tables", hex.EncodeToString(blob[:])), ft.Encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newMirrorNode(t, key, st, reg, nil, func(c *NodeConfig) { c.HoldingsDir = mdir })
	b := newMirrorNode(t, key, st, reg, nil)
	if _, ok := m.Plain().PieceTable(t.Context(), registry.Ref{}, blob, false); !ok {
		t.Fatal("M did not load the table from its disk")
	}
	var ords []uint32
	for i := range ft.Count() {
		c := ft.Chunk(i)
		if err := m.cache.PutChunk(c, fake[c.CompressedOffset:c.CompressedOffset+uint64(c.Size)]); err != nil {
			t.Fatal(err)
		}
		ords = append(ords, uint32(i))
	}
	m.router.Announce(plain.Key(blob), ords)

	code, body, err := b.get(t, "test/plain", blob, "")
	if ft.Count() > 1 {
		if err == nil || code != http.StatusOK || len(body) >= len(data) {
			t.Fatalf("GET through a lying table: got %d, %d bytes, err %v; want 200 cut short", code, len(body), err)
		}
	} else if err != nil || code != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("GET of one piece through a lying table: got %d, %d bytes (equal %v), err %v; want the blob from the origin",
			code, len(body), bytes.Equal(body, data), err)
	}
	if !b.eng.Avoided(m.h.ID()) {
		t.Fatal("B does not avoid the peer with the lying table")
	}
	for i := range ft.Count() {
		if b.cache.Has(cache.SHA256(ft.Digests[i])) {
			t.Fatalf("B still holds piece %d read through the lying table", i)
		}
	}
	if _, _, reports := b.router.snapshot(); !hasBadReport(reports, plain.Key(blob)) {
		t.Fatalf("B reported %+v, want a bad-bytes report for the blob", reports)
	}
	b.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if _, ok := b.Plain().PieceTable(t.Context(), registry.Ref{}, blob, false); !ok {
		t.Fatal("B did not keep the table of the blob it read from the origin")
	}
}

func hasBadReport(rs []route.Outcome, blob rafs.Digest) bool {
	for _, o := range rs {
		if o.Blob == blob && o.BadBytes {
			return true
		}
	}
	return false
}

var _ = fmt.Sprintf

// TestPlainConcurrentPulls: four nodes pull one plain blob through their
// mirrors at the same moment. The pieces are scheduled like chunks, so the
// registry sends the blob about once (not four times), every node gets it
// right, and every node ends with the blob's checked table.
func TestPlainConcurrentPulls(t *testing.T) {
	t.Parallel()
	key, st, reg := clusterKey(t), newScheduler(t), newPlainRegistry(t)
	data := randBytes(47, 40*piece.MinSize+321)
	blob := reg.push(t, "test/plain", data)
	var nodes []*mirrorNode
	for range 4 {
		nodes = append(nodes, newMirrorNode(t, key, st, reg, nil))
	}
	start := make(chan struct{})
	errs := make(chan error, len(nodes))
	for i, m := range nodes {
		go func() {
			<-start
			code, body, err := m.get(t, "test/plain", blob, "")
			switch {
			case err != nil:
				errs <- fmt.Errorf("node %d: %v", i, err)
			case code != http.StatusOK || !bytes.Equal(body, data):
				errs <- fmt.Errorf("node %d: got %d with %d bytes (equal %v)", i, code, len(body), bytes.Equal(body, data))
			default:
				errs <- nil
			}
		}()
	}
	close(start)
	for range nodes {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}
	sent := reg.blobBytes.Load()
	t.Logf("registry sent %d blob bytes for 4 concurrent pulls of %d (%.2fx)", sent, len(data), float64(sent)/float64(len(data)))
	if sent > int64(len(data))*105/100 {
		t.Errorf("registry sent %d blob bytes, %.2fx the blob; want at most 1.05x", sent, float64(sent)/float64(len(data)))
	}
	var peerBytes int64
	for i, m := range nodes {
		if _, ok := m.Plain().PieceTable(t.Context(), registry.Ref{}, blob, false); !ok {
			t.Errorf("node %d does not keep the blob's checked table", i)
		}
		st := m.Stats()
		peerBytes += st.PeerBytes + st.LivePeerBytes
	}
	if peerBytes < int64(len(data)) {
		t.Errorf("nodes got %d bytes from each other, want at least the blob (%d)", peerBytes, len(data))
	}
}

// TestPlainLivePullLiar: node M's view of the origin flips a byte in
// every ranged blob response (a man in the middle, or a node lying about
// what it fetched), so the pieces M fetches from the origin, names and
// announces in a live pull are wrong yet match the digests M names. B,
// pulling beside M, takes pieces from M, each matching M's digest, and
// the whole blob fails the layer digest: B's client never gets the whole
// wrong blob, B drops it, pulls it from the origin next, and the pieces
// recorded there convict M, which B avoids.
func TestPlainLivePullLiar(t *testing.T) {
	t.Parallel()
	key, st, reg := clusterKey(t), newScheduler(t), newPlainRegistry(t)
	data := randBytes(49, 24*piece.MinSize+77)
	blob := reg.push(t, "test/plain", data)
	target, err := url.Parse(reg.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Header.Get("Range") == "" || !strings.Contains(resp.Request.URL.Path, "/blobs/") || resp.StatusCode != http.StatusPartialContent {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if len(b) > 0 {
			b[len(b)/2] ^= 0x5a
		}
		// Slow, so that M's pull is still going when B's begins.
		time.Sleep(60 * time.Millisecond)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	mitm := httptest.NewServer(rp)
	t.Cleanup(mitm.Close)
	// One piece per ranged GET, so that M's pull takes a while.
	m := newMirrorNode(t, key, st, &plainRegistry{srv: mitm}, nil, func(c *NodeConfig) { c.OriginMaxRange = piece.MinSize })
	b := newMirrorNode(t, key, st, reg, nil)

	// M starts first, so that it holds pieces when B asks.
	mDone := make(chan struct{})
	go func() {
		defer close(mDone)
		_, _, _ = m.get(t, "test/plain", blob, "")
	}()
	rafstest.Eventually(t, 10*time.Second, "M announcing pieces of the blob", func() bool {
		ann, _, _ := m.router.snapshot()
		return len(ann[plain.Key(blob)]) > 0
	})
	code, body, err := b.get(t, "test/plain", blob, "")
	<-mDone
	if err == nil && code == http.StatusOK && len(body) == len(data) {
		t.Fatalf("B's first pull, through M's pieces, got a whole blob (equal %v); want it cut short", bytes.Equal(body, data))
	}
	// The retry, as a client would make it: from the origin, and M
	// convicted by the pieces recorded there.
	b.mustGet(t, "test/plain", blob, "", data, http.StatusOK)
	if !b.eng.Avoided(m.h.ID()) {
		t.Fatal("B does not avoid M after the origin's copy showed M's digests wrong")
	}
	if s := b.Stats(); s.BadPeers == 0 {
		t.Error("B counted no bad peer")
	}
	if _, ok := b.Plain().PieceTable(t.Context(), registry.Ref{}, blob, false); !ok {
		t.Fatal("B does not keep the blob's checked table after pulling it right")
	}
}
