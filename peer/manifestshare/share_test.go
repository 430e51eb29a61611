package manifestshare

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	lpeer "github.com/libp2p/go-libp2p/core/peer"

	dhost "damselfly/peer/host"
	"damselfly/rafs"
	"damselfly/rafs/manifests"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/route"
)

const reg, repo = "http://127.0.0.1:5000", "team/app"

func newHost(t *testing.T, key string) *dhost.Host {
	t.Helper()
	cfg := dhost.Loopback(filepath.Join(t.TempDir(), "identity.key"), key)
	cfg.DialTimeout = 5 * time.Second
	h, err := dhost.New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func clusterKey(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	if err := dhost.CreateClusterKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func newStore(t *testing.T) *manifests.Store {
	t.Helper()
	st, err := manifests.Open(t.TempDir(), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// node is one peer of a test: its host, store and share.
type node struct {
	h  *dhost.Host
	st *manifests.Store
	s  *Share
}

func newNode(t *testing.T, key string, r Router) *node {
	t.Helper()
	n := &node{h: newHost(t, key), st: newStore(t)}
	if r == nil {
		n.s = New(n.h, n.st, nil, Config{}, nil)
	} else {
		n.s = New(n.h, n.st, r, Config{}, nil)
	}
	t.Cleanup(func() { n.s.Close() })
	return n
}

// connect connects from to to and waits until from knows to speaks the
// protocol (identify runs after the connection is up).
func connect(t *testing.T, from, to *dhost.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := from.Connect(ctx, to.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	rafstest.Eventually(t, 10*time.Second, "identify of the peer", func() bool {
		ok, _ := from.Peerstore().SupportsProtocols(to.ID(), Protocol)
		return len(ok) > 0
	})
}

func manifest(s string) manifests.Manifest {
	b := []byte(`{"schemaVersion":2,"n":"` + s + `"}`)
	return manifests.Manifest{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: manifests.Digest(b), Body: b}
}

func TestManifestFromAConnectedPeer(t *testing.T) {
	t.Parallel()
	key := clusterKey(t)
	a, b := newNode(t, key, nil), newNode(t, key, nil)
	m := manifest("one")
	if err := a.st.Put(reg, repo, m); err != nil {
		t.Fatal(err)
	}
	connect(t, b.h, a.h)
	got, err := b.s.Manifest(context.Background(), reg, repo, m.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != m.Digest || !bytes.Equal(got.Body, m.Body) || got.MediaType != m.MediaType {
		t.Fatalf("got %+v, want %+v", got, m)
	}
	if kept, err := b.st.Get(reg, repo, m.Digest); err != nil || !bytes.Equal(kept.Body, m.Body) {
		t.Fatalf("not kept in the asking node's store: %v", err)
	}
	// Another repository's manifest of the same bytes is another entry:
	// the peer does not hold it there.
	if _, err := b.s.Manifest(context.Background(), reg, "other/repo", m.Digest); !errors.Is(err, ErrNotFound) {
		t.Fatalf("manifest of another repository: %v, want ErrNotFound", err)
	}
}

func TestTagTheYoungestResolutionWins(t *testing.T) {
	t.Parallel()
	key := clusterKey(t)
	old, young, asker := newNode(t, key, nil), newNode(t, key, nil), newNode(t, key, nil)
	m1, m2 := manifest("v1"), manifest("v2")
	at := time.Now().Add(-time.Hour).UTC()
	for _, c := range []struct {
		n  *node
		m  manifests.Manifest
		at time.Time
	}{{old, m1, at}, {young, m2, at.Add(30 * time.Minute)}} {
		if err := c.n.st.Put(reg, repo, c.m); err != nil {
			t.Fatal(err)
		}
		if _, err := c.n.st.KeepTag(manifests.Tag{Registry: reg, Repo: repo, Tag: "latest", Digest: c.m.Digest, At: c.at}); err != nil {
			t.Fatal(err)
		}
	}
	// The asker's own resolution is older than both.
	if _, err := asker.st.KeepTag(manifests.Tag{Registry: reg, Repo: repo, Tag: "latest", Digest: m1.Digest, At: at.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	connect(t, asker.h, old.h)
	connect(t, asker.h, young.h)
	got, err := asker.s.Tag(context.Background(), reg, repo, "latest")
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != m2.Digest || !got.At.Equal(at.Add(30*time.Minute)) {
		t.Fatalf("got %s at %v, want %s at %v", got.Digest, got.At, m2.Digest, at.Add(30*time.Minute))
	}
	// Kept with the peer's time, not the asker's, and with its manifest.
	if t2, _ := asker.st.Tag(reg, repo, "latest"); t2.Digest != m2.Digest || !t2.At.Equal(got.At) {
		t.Fatalf("asker's store has %+v", t2)
	}
	if _, err := asker.st.Get(reg, repo, m2.Digest); err != nil {
		t.Fatalf("the resolution's manifest was not kept: %v", err)
	}
	if _, err := asker.s.Tag(context.Background(), reg, repo, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a tag nobody holds: %v, want ErrNotFound", err)
	}
}

// liar serves answers made by answer for every question.
func liar(h *dhost.Host, answer func(q request) []byte) {
	h.SetStreamHandler(Protocol, func(st network.Stream) {
		defer st.Close()
		q, err := readRequest(bufio.NewReader(st))
		if err != nil {
			st.Reset()
			return
		}
		st.Write(answer(q))
	})
}

func TestLyingPeersAreNotBelieved(t *testing.T) {
	t.Parallel()
	key := clusterKey(t)
	asker := newNode(t, key, nil)
	m, other := manifest("real"), manifest("forged")
	cases := map[string]func(q request) []byte{
		"wrong body": func(q request) []byte {
			b, _ := answer{status: StatusOK, manifest: &manifests.Manifest{Digest: q.object, Body: other.Body}}.encode(kindManifest)
			return append(b[:0:0], b...)
		},
		"resolution in the future": func(q request) []byte {
			b, _ := answer{status: StatusOK, tag: manifests.Tag{Digest: m.Digest, At: time.Now().Add(time.Hour)}}.encode(q.kind)
			return b
		},
		"oversized body": func(q request) []byte {
			return []byte{0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff}
		},
		"unknown status": func(q request) []byte { return []byte{9} },
		"cut short":      func(q request) []byte { return []byte{0, 1, 0, 4, 'a'} },
	}
	for name, lie := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, key)
			liar(h, lie)
			connect(t, asker.h, h)
			defer asker.h.Network().ClosePeer(h.ID())
			if got, err := asker.s.Manifest(context.Background(), reg, repo, m.Digest); err == nil {
				t.Fatalf("believed %+v", got)
			}
			if _, err := asker.s.Tag(context.Background(), reg, repo, "latest"); err == nil {
				t.Fatal("believed a tag resolution")
			}
			if n := asker.st.Names(); len(n) != 0 {
				t.Fatalf("the store kept %v from a liar", n)
			}
		})
	}
}

// fakeRouter names holder for every route and records announcements.
type fakeRouter struct {
	holder lpeer.AddrInfo
	origin bool

	mu        sync.Mutex
	announced map[rafs.Digest]int
	dropped   map[rafs.Digest]int
	abandoned int
}

func (f *fakeRouter) Route(ctx context.Context, blob rafs.Digest, chunks []uint32, _ uint64) (route.Route, error) {
	if f.origin {
		return route.Route{Origin: chunks}, nil
	}
	return route.Route{Parents: []route.Parent{{Info: f.holder, Chunks: chunks}}}, nil
}

func (f *fakeRouter) Announce(blob rafs.Digest, chunks []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.announced[blob]++
}

func (f *fakeRouter) Drop(blob rafs.Digest, chunks []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped[blob]++
}

func (f *fakeRouter) Abandon(blob rafs.Digest, chunks []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abandoned++
}

func TestRoutedHolderIsAskedAndHoldingsAnnounced(t *testing.T) {
	t.Parallel()
	key := clusterKey(t)
	holderRouter := &fakeRouter{announced: map[rafs.Digest]int{}, dropped: map[rafs.Digest]int{}}
	m := manifest("routed")
	// Held before the share starts: announced when it does.
	holder := &node{h: newHost(t, key), st: newStore(t)}
	if err := holder.st.Put(reg, repo, m); err != nil {
		t.Fatal(err)
	}
	holder.s = New(holder.h, holder.st, holderRouter, Config{}, nil)
	t.Cleanup(func() { holder.s.Close() })
	mk := HoldKey(manifests.Name(reg, repo, m.Digest))
	if holderRouter.announced[mk] != 1 {
		t.Fatalf("held manifest announced %d times at start, want 1", holderRouter.announced[mk])
	}
	if err := holder.st.SetTag(reg, repo, "v1", m.Digest); err != nil {
		t.Fatal(err)
	}
	tk := HoldKey(manifests.Name(reg, repo, "v1"))
	if holderRouter.announced[tk] != 1 {
		t.Fatalf("tag resolution announced %d times, want 1", holderRouter.announced[tk])
	}
	holder.st.DropTag(reg, repo, "v1")
	if holderRouter.dropped[tk] != 1 {
		t.Fatalf("dropped tag resolution: %d drops, want 1", holderRouter.dropped[tk])
	}

	// The asker is not connected to the holder: the route's addresses
	// are how it reaches it.
	askRouter := &fakeRouter{holder: holder.h.AddrInfo(), announced: map[rafs.Digest]int{}, dropped: map[rafs.Digest]int{}}
	asker := newNode(t, key, askRouter)
	got, err := asker.s.Manifest(context.Background(), reg, repo, m.Digest)
	if err != nil || got.Digest != m.Digest {
		t.Fatalf("got %v, %v", got.Digest, err)
	}
	if askRouter.announced[mk] != 1 {
		t.Fatalf("asker announced the manifest it got %d times, want 1", askRouter.announced[mk])
	}
	// A turn at the origin is given back.
	askRouter.origin = true
	if _, err := asker.s.Manifest(context.Background(), reg, repo, manifest("none").Digest); !errors.Is(err, ErrNotFound) {
		t.Fatalf("nobody holds it: %v", err)
	}
	if askRouter.abandoned != 1 {
		t.Fatalf("origin turns abandoned: %d, want 1", askRouter.abandoned)
	}
}

func TestBadRequestsAreRefused(t *testing.T) {
	for name, q := range map[string]request{
		"kind":           {kind: 7, registry: reg, repo: repo, object: "x"},
		"no registry":    {kind: kindTag, repo: repo, object: "x"},
		"digest as tag":  {kind: kindTag, registry: reg, repo: repo, object: manifest("x").Digest},
		"tag as digest":  {kind: kindManifest, registry: reg, repo: repo, object: "latest"},
		"sha512 digest":  {kind: kindManifest, registry: reg, repo: repo, object: "sha512:" + string(bytes.Repeat([]byte("a"), 128))},
		"long repo name": {kind: kindTag, registry: reg, repo: string(bytes.Repeat([]byte("a"), maxRepo+1)), object: "x"},
	} {
		if _, err := q.encode(); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	good := request{kind: kindTag, registry: reg, repo: repo, object: "v1"}
	b, err := good.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := readRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil || got != good {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := readRequest(bufio.NewReader(bytes.NewReader(b[:i]))); err == nil {
			t.Fatalf("a request cut to %d bytes was read", i)
		}
	}
}

func FuzzReadRequest(f *testing.F) {
	for _, q := range []request{
		{kind: kindTag, registry: reg, repo: repo, object: "v1"},
		{kind: kindManifest, registry: reg, repo: repo, object: manifest("x").Digest},
	} {
		b, _ := q.encode()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := readRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		// What is read is valid and encodes back to what was read.
		enc, err := q.encode()
		if err != nil {
			t.Fatalf("read an invalid request %+v: %v", q, err)
		}
		if !bytes.Equal(enc, b[:len(enc)]) {
			t.Fatalf("re-encoded %x, read from %x", enc, b)
		}
	})
}

func FuzzReadAnswer(f *testing.F) {
	m := manifest("fuzz")
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	tq := request{kind: kindTag, registry: reg, repo: repo, object: "v1"}
	mq := request{kind: kindManifest, registry: reg, repo: repo, object: m.Digest}
	for _, c := range []struct {
		q request
		a answer
	}{
		{tq, answer{status: StatusOK, tag: manifests.Tag{Digest: m.Digest, At: now.Add(-time.Hour)}, manifest: &m}},
		{tq, answer{status: StatusOK, tag: manifests.Tag{Digest: m.Digest, At: now}}},
		{mq, answer{status: StatusOK, manifest: &m}},
		{mq, answer{status: StatusNotHeld}},
		{request{kind: kindPublic, registry: reg, repo: repo, object: "v1"}, answer{status: StatusOK, tag: manifests.Tag{At: now.Add(-time.Hour)}}},
	} {
		b, err := c.a.encode(c.q.kind)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(c.q.kind, b)
	}
	pq := request{kind: kindPublic, registry: reg, repo: repo, object: "v1"}
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		q, tag := mq, false
		switch kind {
		case kindTag:
			q, tag = tq, true
		case kindPublic:
			q = pq
		}
		a, err := readAnswer(bufio.NewReader(bytes.NewReader(b)), q, now)
		if err != nil || a.status != StatusOK {
			return
		}
		if a.manifest != nil {
			want := q.object
			if tag {
				want = a.tag.Digest
			}
			if manifests.Digest(a.manifest.Body) != want || a.manifest.Digest != want {
				t.Fatalf("accepted a manifest of digest %s for %s", manifests.Digest(a.manifest.Body), want)
			}
		} else if q.kind == kindManifest {
			t.Fatal("a manifest answer without a manifest")
		}
		if q.kind != kindManifest && a.tag.At.After(now.Add(maxSkew)) {
			t.Fatalf("accepted a resolution at %v", a.tag.At)
		}
	})
}

func TestPublicQuestion(t *testing.T) {
	t.Parallel()
	key := clusterKey(t)
	a, b, asker := newNode(t, key, nil), newNode(t, key, nil), newNode(t, key, nil)
	at := time.Now().Add(-time.Hour).UTC()
	a.s.SetPublic(func(r, rp string) (time.Time, bool) { return at, r == reg && rp == repo })
	b.s.SetPublic(func(r, rp string) (time.Time, bool) { return at.Add(time.Minute), r == reg && rp == repo })
	connect(t, asker.h, a.h)
	connect(t, asker.h, b.h)
	got, err := asker.s.Public(context.Background(), reg, repo, "v1")
	if err != nil || !got.Equal(at.Add(time.Minute)) {
		t.Fatalf("got %v, %v; want the latest answer, %v", got, err, at.Add(time.Minute))
	}
	if _, err := asker.s.Public(context.Background(), reg, "private/app", "v1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a repository no peer saw public: %v, want ErrNotFound", err)
	}
}
